import re
from pathlib import Path

import numpy as np
import pytest

from alignmt.evaluation.alignment import (
    alignment_error_rate,
    format_pharaoh,
    hard_alignment,
    parse_gold,
    parse_pharaoh,
    word_attention,
)

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_pharaoh_round_trip():
    line = "0-0 1-2 2-1 10-3"
    assert parse_pharaoh(line) == {(0, 0), (1, 2), (2, 1), (10, 3)}
    assert format_pharaoh(parse_pharaoh(line)) == line
    assert format_pharaoh({(2, 1), (0, 0)}) == "0-0 2-1"


def test_pharaoh_empty_line():
    assert parse_pharaoh("") == set()
    assert parse_pharaoh("  \n") == set()
    assert format_pharaoh(set()) == ""


@pytest.mark.parametrize("bad", ["0-", "a-1", "1_2", "0-1-2", "-1-2", "1", "0?1"])
def test_pharaoh_malformed_names_token(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        parse_pharaoh(f"0-0 {bad} 2-2")


def test_gold_with_sure_and_possible_links_on_one_line():
    sure, possible = parse_gold("0-0 1?2 2-1 3?3")
    assert sure == {(0, 0), (2, 1)}
    assert possible == {(0, 0), (2, 1), (1, 2), (3, 3)}  # P includes S
    assert parse_gold("") == (set(), set())
    assert parse_gold("0-0 0?0") == ({(0, 0)}, {(0, 0)})  # marked both ways: sure


def test_gold_with_possible_links_from_a_second_file():
    sure, possible = parse_gold("0-0 1-1", "1-2 0-0")
    assert sure == {(0, 0), (1, 1)}
    assert possible == {(0, 0), (1, 1), (1, 2)}
    with pytest.raises(ValueError, match=re.escape("'1?2'")):  # that file is plain i-j
        parse_gold("0-0", "1?2")


@pytest.mark.parametrize("bad", ["0?", "0-?1", "a?1", "0:1", "1"])
def test_gold_malformed_names_token(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        parse_gold(f"0-0 {bad} 2?2")


# Attention over 3 source words (columns) for 3 target words (rows).
WEIGHTS = np.array(
    [
        [0.7, 0.2, 0.1],
        [0.1, 0.3, 0.6],
        [0.4, 0.4, 0.2],
    ]
)


def test_hard_alignment_argmax():
    # Target 2 ties between sources 0 and 1; numpy's argmax takes the first.
    assert hard_alignment(WEIGHTS) == {(0, 0), (2, 1), (0, 2)}


def test_hard_alignment_threshold():
    assert hard_alignment(WEIGHTS, "threshold", 0.5) == {(0, 0), (2, 1)}
    assert hard_alignment(WEIGHTS, "threshold", 0.4) == {(0, 0), (2, 1), (0, 2), (1, 2)}
    assert hard_alignment(WEIGHTS, "threshold", 0.8) == set()


def test_a_row_without_attention_gets_no_argmax_link():
    weights = np.array([[0.0, 0.0], [0.2, 0.8]])
    assert hard_alignment(weights) == {(1, 1)}


def test_hard_alignment_unknown_method():
    with pytest.raises(ValueError, match=r"argmax.*threshold"):
        hard_alignment(WEIGHTS, "softmax")


def test_gold_against_itself_is_zero():
    gold = [parse_pharaoh("0-0 1-1 2-3"), parse_pharaoh("0-1 1-0")]
    assert alignment_error_rate(gold, gold) == 0.0


def test_known_wrong_alignment():
    predicted = [parse_pharaoh("0-0 1-2 2-1"), parse_pharaoh("0-0")]
    sure = [parse_pharaoh("0-0 1-1 2-2"), parse_pharaoh("0-0 1-1")]
    # |A| = 3 + 1 = 4, |S| = 3 + 2 = 5, |A∩S| = |A∩P| = 1 + 1 = 2 (P = S)
    # AER = 1 - (2 + 2) / (4 + 5) = 5/9
    assert alignment_error_rate(predicted, sure) == pytest.approx(5 / 9)


def test_possible_links_are_not_penalised():
    predicted = [parse_pharaoh("0-0 1-2 2-1")]
    sure = [parse_pharaoh("0-0 1-1")]
    possible = [parse_pharaoh("1-2")]  # sure links count as possible too
    # |A| = 3, |S| = 2, |A∩S| = 1, |A∩P| = |{0-0, 1-2}| = 2
    # AER = 1 - (1 + 2) / (3 + 2) = 2/5
    assert alignment_error_rate(predicted, sure, possible) == pytest.approx(2 / 5)


def test_disjoint_alignment_is_one():
    assert alignment_error_rate([{(0, 1)}], [{(0, 0)}]) == 1.0


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="2 predicted, 1 sure"):
        alignment_error_rate([set(), set()], [{(0, 0)}])


def test_sure_and_possible_links_by_hand():
    gold = [parse_gold("0-0 1-1 1?2 2?1 3-3"), parse_gold("0-1 1-0", "0-0")]
    sure = [s for s, _ in gold]
    possible = [p for _, p in gold]
    predicted = [parse_pharaoh("0-0 1-2 2-2 3-3"), parse_pharaoh("0-0 1-0")]
    # S = {0-0, 1-1, 3-3} + {0-1, 1-0}: |S| = 5; P adds 1-2, 2-1 and 0-0 (second sentence).
    # |A| = 4 + 2 = 6. A∩S: {0-0, 3-3} + {1-0} = 3. A∩P: {0-0, 1-2, 3-3} + {0-0, 1-0} = 5
    # (2-2 is in neither). AER = 1 - (3 + 5) / (6 + 5) = 3/11.
    assert alignment_error_rate(predicted, sure, possible) == pytest.approx(3 / 11)
    # Without the possible links, A∩P = A∩S = 3: AER = 1 - 6/11 = 5/11.
    assert alignment_error_rate(predicted, sure) == pytest.approx(5 / 11)


# Source words: Der | Hundeführer (3 pieces) | lacht; target: The | dog-handler (2) | laughs.
SOURCE_WORD_IDS = [0, 1, 1, 1, 2]
TARGET_WORD_IDS = [0, 1, 1, 2]
TOKEN_ATTENTION = np.array(
    [
        [0.70, 0.10, 0.10, 0.00, 0.10],  # The
        [0.05, 0.25, 0.20, 0.15, 0.35],  # dog-   (most on one piece of "lacht")
        [0.00, 0.10, 0.30, 0.20, 0.40],  # handler
        [0.10, 0.10, 0.00, 0.10, 0.70],  # laughs
    ]
)


def test_token_attention_summed_over_source_pieces_and_averaged_over_target_pieces():
    words = word_attention(TOKEN_ATTENTION, TARGET_WORD_IDS, SOURCE_WORD_IDS)
    # Row "The": 0.70 | 0.10 + 0.10 + 0.00 | 0.10.
    # Row "dog-handler": the mean of 0.05 | 0.60 | 0.35 and 0.00 | 0.60 | 0.40.
    # Row "laughs": 0.10 | 0.20 | 0.70.
    expected = [[0.70, 0.20, 0.10], [0.025, 0.60, 0.375], [0.10, 0.20, 0.70]]
    np.testing.assert_allclose(words, expected)
    np.testing.assert_allclose(words.sum(axis=1), 1.0)  # rows stay distributions
    gold = [{(0, 0), (1, 1), (2, 2)}]
    assert alignment_error_rate([hard_alignment(words)], gold) == 0.0
    assert hard_alignment(words, "threshold", 0.5) == gold[0]
    # Links taken on the tokens and read as words: 0-0, 4-1, 4-2, 4-3 against the gold's
    # three: one hit, AER = 1 - 2/7.
    tokens = hard_alignment(TOKEN_ATTENTION)
    assert tokens == {(0, 0), (4, 1), (4, 2), (4, 3)}
    assert alignment_error_rate([tokens], gold) == pytest.approx(5 / 7)


def test_a_word_without_tokens_gets_no_link():
    # Target word 1 lost all its tokens (e.g. normalised away): a zero row, no link.
    words = word_attention(np.array([[0.9, 0.1], [0.2, 0.8]]), [0, 2], [0, 1])
    np.testing.assert_allclose(words, [[0.9, 0.1], [0.0, 0.0], [0.2, 0.8]])
    assert hard_alignment(words) == {(0, 0), (1, 2)}


def test_word_ids_must_match_the_attention():
    with pytest.raises(ValueError, match=r"shape \(4, 5\) for 4 target and 4 source tokens"):
        word_attention(TOKEN_ATTENTION, TARGET_WORD_IDS, SOURCE_WORD_IDS[:4])


@pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir(),
    reason=f"Multi30k not found at {SHARED_DATA / 'multi30k'} (the repository's ../shared/data)",
)
def test_word_level_gold_against_sentencepiece_attention_on_real_text(tmp_path):
    from alignmt.data import SentencePieceTokenizer
    from alignmt.data.corpus import read_lines

    lines = read_lines(SHARED_DATA / "multi30k" / "train.en.gz")[:2000]
    tokenizer = SentencePieceTokenizer("bpe", vocab_size=400)
    tokenizer.fit(lines, tmp_path / "en.model")
    # Each sentence aligned to itself word for word. Every target piece of word k puts 0.6 on
    # word k, spread evenly over its pieces, and 0.4 on the first piece of a neighbouring
    # word: the word sums are then exactly 0.6 and 0.4, while on a word of two or more
    # pieces the single largest piece is the neighbour's.
    predicted, gold, split_words = [], [], 0
    for sentence in read_lines(SHARED_DATA / "multi30k" / "val.en.gz")[:200]:
        ids = np.array(tokenizer.word_ids(sentence))
        n = len(sentence.split())
        assert len(ids) == len(tokenizer.tokenize(sentence)) and set(ids) == set(range(n))
        attention, expected = np.zeros((len(ids), len(ids))), np.zeros((n, n))
        for k in range(n):
            neighbour = k + 1 if k + 1 < n else k - 1
            pieces = ids == k
            attention[np.ix_(pieces, pieces)] = 0.6 / pieces.sum()
            attention[pieces, np.argmax(ids == neighbour)] = 0.4
            expected[k, k], expected[k, neighbour] = 0.6, 0.4
        words = word_attention(attention, ids, ids)
        np.testing.assert_allclose(words, expected, atol=1e-12)
        predicted.append(hard_alignment(words))
        gold.append({(k, k) for k in range(n)})
        split_words += int((np.bincount(ids) >= 2).sum())
    assert split_words > 100  # the test has words that subword attention gets wrong
    assert alignment_error_rate(predicted, gold) == 0.0
