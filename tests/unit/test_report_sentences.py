"""The per-sentence results file behind the attention explorer, and the p-values of the
runs table (sacrebleu's paired bootstrap)."""

import gzip

import pytest
from sacrebleu.metrics import BLEU

from alignmt.report.explorer import explorer_data, pack, unpack
from alignmt.report.sentences import (
    SENTENCES_FILE,
    gold_cells,
    read_sentences,
    sentence_bleu,
    write_sentences,
)
from alignmt.report.significance import paired_bootstrap_p


def test_word_level_gold_marks_every_token_of_both_words():
    """Source word 1 is two tokens; `2?2` is a possible link. Cells: [row, column, sure]."""
    cells = gold_cells(
        "0-1 1-0 2?2", source_words=[0, 1, 1, 2], reference_words=[0, 1, 2], unit="words"
    )
    assert sorted(cells) == [[0, 1, 1], [0, 2, 1], [1, 0, 1], [2, 3, 0]]


def test_token_level_gold_marks_its_cell():
    cells = gold_cells("0-1 1-0", source_words=[0, 0], reference_words=[0, 0], unit="tokens")
    assert sorted(cells) == [[0, 1, 1], [1, 0, 1]]


def test_sentence_bleu_scores_unk_as_one_wrong_word():
    metric = BLEU(effective_order=True)
    expected = metric.sentence_score("a zzz c d", ["a b c d"]).score
    assert sentence_bleu("a [UNK] c d", "a b c d") == pytest.approx(expected)
    assert sentence_bleu("a b c d", "a b c d") == pytest.approx(100.0)


def test_the_file_reads_back_and_a_broken_line_is_named(tmp_path):
    records = [{"index": i, "source": f"s{i}", "attention": [[0.25, 0.75]]} for i in range(3)]
    write_sentences(tmp_path / SENTENCES_FILE, iter(records))
    assert read_sentences(tmp_path / SENTENCES_FILE) == records
    with gzip.open(tmp_path / "broken.jsonl.gz", "wt") as f:
        f.write('{"index": 0}\n{"index": \n')
    with pytest.raises(ValueError, match=r"broken.jsonl.gz, line 2"):
        read_sentences(tmp_path / "broken.jsonl.gz")


def write_run(run_dir, sources, references, hypotheses):
    run_dir.mkdir(parents=True)
    records = [
        {
            "index": i,
            "source": s,
            "reference": r,
            "hypothesis": h,
            "bleu": 0.0,
            "bucket": "1-10",
            "length": len(s.split()),
            "source_tokens": [*s.split(), "[EOS]"],
            "target_tokens": [*h.split(), "[EOS]"],
            "attention": [
                [1.0 if c == min(k, len(s.split())) else 0.0 for c in range(len(s.split()) + 1)]
                for k in range(len(h.split()) + 1)
            ],
        }
        for i, (s, r, h) in enumerate(zip(sources, references, hypotheses, strict=True))
    ]
    write_sentences(run_dir / SENTENCES_FILE, records)
    (run_dir / "hypotheses.txt").write_text("".join(h + "\n" for h in hypotheses))
    return run_dir


SOURCES = [f"source sentence number {i} with some words" for i in range(60)]
REFERENCES = [f"the reference of sentence {i} has seven words" for i in range(60)]


def test_a_much_better_run_is_significant_and_a_one_word_change_is_not(tmp_path):
    garbage = ["nothing like it at all"] * 60
    one_word = [*REFERENCES[:-1], REFERENCES[-1].replace("seven", "six")]
    good = write_run(tmp_path / "good", SOURCES, REFERENCES, REFERENCES)
    bad = write_run(tmp_path / "bad", SOURCES, REFERENCES, garbage)
    close = write_run(tmp_path / "close", SOURCES, REFERENCES, one_word)
    assert paired_bootstrap_p(good, bad) < 0.01
    assert paired_bootstrap_p(good, close) > 0.05


def test_runs_on_different_test_sets_are_not_compared(tmp_path):
    a = write_run(tmp_path / "a", SOURCES, REFERENCES, REFERENCES)
    b = write_run(tmp_path / "b", SOURCES[::-1], REFERENCES[::-1], REFERENCES[::-1])
    assert paired_bootstrap_p(a, b) is None
    assert paired_bootstrap_p(a, tmp_path / "no-such-run") is None


def test_explorer_data_keeps_texts_once_per_test_set_and_weights_in_hundredths(tmp_path):
    a = write_run(tmp_path / "a", SOURCES[:2], REFERENCES[:2], ["x y", "z"])
    b = write_run(tmp_path / "b", SOURCES[:2], REFERENCES[:2], ["x", "y z w"])
    data = unpack(pack(explorer_data([("A", a), ("B", b), ("none", tmp_path / "missing")])))
    assert [r["name"] for r in data["runs"]] == ["A", "B"]
    assert len(data["testsets"]) == 1 and data["runs"][0]["test"] == data["runs"][1]["test"]
    (test,) = data["testsets"].values()
    assert test["source"] == SOURCES[:2]
    # "z": rows z, [EOS]; columns the 7 source words and [EOS]; z attends word 0, [EOS] word 1
    assert data["scale"] == 100
    assert data["runs"][0]["attention"][1] == [100, *[0] * 7, 0, 100, *[0] * 6]
