"""Scripts that turn a sweep's run directories into a study's tables and figures
(`python -m alignmt.studies.<name> SWEEP_DIR`)."""
