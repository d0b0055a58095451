"""alignmt-translate: n-best lists, attention dumps, empty and over-long lines."""

import json
import os
import subprocess
import sys

import pytest

from alignmt.translate import translate_lines
from tests.conftest import compose_config

LINES = ["the dog sleeps", "", "every cat sees a dog"]


def translate_config(trained_run, *overrides):
    _, metrics = trained_run
    return compose_config("translate", [f"ckpt={metrics['best_checkpoint']}", *overrides])


def test_nbest_prints_k_moses_lines_per_input_best_first(trained_run):
    beam = ["decoding=beam", "decoding.beam_size=3"]
    lines = translate_lines(translate_config(trained_run, *beam, "nbest=3"), LINES)
    entries = [line.split(" ||| ") for line in lines]
    assert [int(e[0]) for e in entries] == [0, 0, 0, 1, 2, 2, 2]
    assert all(len(e) == 3 for e in entries)
    assert entries[3][1:] == ["", "0.0000"]  # an empty line: one empty entry
    for i in (0, 2):
        scores = [float(e[2]) for e in entries if e[0] == str(i)]
        assert scores == sorted(scores, reverse=True)
    best = translate_lines(translate_config(trained_run, *beam), LINES)
    assert best == [entries[0][1], "", entries[4][1]]


def test_nbest_needs_a_search_that_keeps_several_hypotheses(trained_run):
    with pytest.raises(ValueError, match="decoding=beam"):
        translate_lines(translate_config(trained_run, "decoding=greedy", "nbest=2"), LINES)


def test_attention_dump_has_one_json_line_per_input(trained_run, tmp_path):
    dump = tmp_path / "attention.jsonl"
    outputs = translate_lines(translate_config(trained_run, f"attention_file={dump}"), LINES)
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(records) == len(LINES)
    assert records[1] == {"source": [], "output": [], "weights": []}
    for i in (0, 2):
        record = records[i]
        assert record["source"] == [*LINES[i].split(), "[EOS]"]
        assert record["output"][-1] == "[EOS]"
        assert " ".join(record["output"][:-1]) == outputs[i]
        assert len(record["weights"]) == len(record["output"])
        for row in record["weights"]:
            assert len(row) == len(record["source"])
            assert sum(row) == pytest.approx(1.0, abs=1e-3)


def test_an_over_long_line_is_translated_with_a_warning_naming_it(trained_run, capsys):
    long_line = " ".join(["the dog sleeps"] * 34)  # 102 tokens; data.max_length is 100
    outputs = translate_lines(translate_config(trained_run), ["a cat sleeps", long_line, ""])
    assert len(outputs) == 3 and outputs[2] == ""
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1
    assert "line 2 " in warnings[0] and "102 tokens" in warnings[0]
    assert "data.max_length=100" in warnings[0]


def test_command_line_reads_stdin_and_writes_nbest_to_stdout(trained_run):
    _, metrics = trained_run
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "alignmt.translate",
            f"ckpt={metrics['best_checkpoint']}",
            "decoding=beam",
            "decoding.beam_size=2",
            "nbest=2",
        ],
        input="the dog sleeps\n\n",
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1"]


def translate_stdin(trained_run, data: bytes) -> subprocess.CompletedProcess:
    _, metrics = trained_run
    return subprocess.run(
        [sys.executable, "-m", "alignmt.translate", f"ckpt={metrics['best_checkpoint']}"],
        input=data,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_empty_standard_input_prints_nothing(trained_run):
    done = translate_stdin(trained_run, b"")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b""


def test_a_line_that_is_not_utf8_is_translated_with_a_warning_naming_it(trained_run):
    lines = [b"the dog sleeps", b"a cat \xff\xfe sleeps", b"every cat sees a dog"]
    done = translate_stdin(trained_run, b"\n".join(lines) + b"\n")
    assert done.returncode == 0, done.stderr.decode()
    decoded = [line.decode("utf-8", errors="replace") for line in lines]
    assert done.stdout.decode().splitlines() == translate_lines(
        translate_config(trained_run), decoded
    )
    warnings = [line for line in done.stderr.decode().splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "standard input line 2 is not valid UTF-8" in warnings[0] and "byte 6" in warnings[0]
