from alignmt.report import main

main()
