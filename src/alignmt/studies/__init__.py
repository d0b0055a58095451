"""Scripts that turn a sweep's run directories into a study's tables and figures
(`python -m alignmt.studies.<name> SWEEP_DIR`)."""


def markdown_table(rows: list[dict]) -> str:
    """Rows of equal keys as a Markdown table, the keys as its header."""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"
