"""ROUGE, TER and multi-reference BLEU against small examples worked out by hand."""

import pytest

from alignmt.data.corpus import ParallelText
from alignmt.data.tokenizers import WhitespaceTokenizer
from alignmt.evaluation import results as results_module
from alignmt.evaluation.bleu import corpus_bleu, corpus_scores
from alignmt.evaluation.metrics import corpus_rouge, corpus_ter, translation_scores
from alignmt.evaluation.results import Evaluation, SentenceResult
from alignmt.translator import Translation


def f1(precision, recall):
    return 2 * precision * recall / (precision + recall)


def test_rouge_counts_bleus_tokens_with_case_and_umlauts():
    hypotheses = ["the cat sat on the mat", "Die Straße ist grün"]
    references = ["the cat is on the mat", "die Straße ist grün."]
    # 1: unigrams the x2, cat, on, mat of 6 each side; bigrams "the cat", "on the", "the mat"
    #    of 5; LCS "the cat on the mat", 5 words.
    # 2: 13a splits off the full stop: reference die Straße ist grün . (5 tokens); "Die" is not
    #    "die"; unigrams Straße, ist, grün (3 of 4 and of 5); bigrams "Straße ist", "ist grün"
    #    (2 of 3 and of 4); LCS "Straße ist grün".
    rouge = corpus_rouge(hypotheses, references)
    assert rouge["rouge1"] == pytest.approx(100 * (5 / 6 + f1(3 / 4, 3 / 5)) / 2)
    assert rouge["rouge2"] == pytest.approx(100 * (3 / 5 + f1(2 / 3, 2 / 4)) / 2)
    assert rouge["rougeL"] == pytest.approx(100 * (5 / 6 + f1(3 / 4, 3 / 5)) / 2)


def test_rouge_takes_each_sentences_best_reference_and_unk_as_one_word():
    hypotheses = ["a [UNK] dog", "x y"]
    first, second = ["a big dog", "p q"], ["the dog", "x y"]
    # 1: [UNK] is one (wrong) word: a, dog of 3 -> F1 2/3; against "the dog": 1/3 and 1/2.
    # 2: exact against the second reference.
    rouge = corpus_rouge(hypotheses, first, [second])
    assert rouge["rouge1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert rouge["rouge2"] == pytest.approx(100 * (0 + 1) / 2)


def test_ter_counts_edits_and_shifts_per_reference_word():
    # 1: one deletion (b) for 3 reference words; 2: one shift (d to the end) for 4.
    score, signature = corpus_ter(["a b c d", "d a b c"], ["a c d", "a b c d"])
    assert score == pytest.approx(100 * (1 + 1) / (3 + 4))
    assert "nrefs:1" in signature and signature.endswith("|unk:one-token")


def test_ter_with_several_references_takes_the_fewest_edits_over_their_mean_length():
    # "a b c": one insertion from "a b c d", three substitutions from "x y z"; tercom divides
    # by the mean reference length, (4 + 3) / 2.
    score, _ = corpus_ter(["a b c"], ["a b c d"], [["x y z"]])
    assert score == pytest.approx(100 * 1 / 3.5)


def test_bleu_clips_each_ngram_by_its_count_in_any_reference():
    hypothesis, first, second = ["a b c d e"], ["a b c x y"], ["z b c d e"]
    # Against both: unigrams 5/5, bigrams 4/4 (ab | bc cd de), trigrams 3/3 (abc | bcd cde),
    # 4-grams 1/2 (bcde); lengths 5 and 5: no brevity penalty.
    both = corpus_bleu(hypothesis, first, extra_references=[second])
    assert both.score == pytest.approx(100 * (1 * 1 * 1 * 0.5) ** 0.25)
    assert both.counts == [5, 4, 3, 1] and both.totals == [5, 4, 3, 2]
    assert corpus_bleu(hypothesis, first).counts == [3, 2, 1, 0]
    scores = corpus_scores(hypothesis, first, extra_references=[second])
    assert scores["bleu"] == pytest.approx(both.score) and "nrefs:2" in scores["bleu_signature"]


def test_a_reference_set_out_of_line_is_refused():
    with pytest.raises(ValueError, match=r"2 hypotheses but 1 references \(set 2\)"):
        translation_scores(["a", "b"], ["a", "b"], [["a"]])


def test_every_reference_reaches_the_test_metrics():
    text = ParallelText(["s1"], ["a b c x y"], extra_references=[["z b c d e"]])
    sentence = SentenceResult(0, Translation([], [], [], [], "a b c d e", 0.0, None))
    results = results_module.test_results(
        Evaluation("test", [sentence], 1.0, 6, 0.0), text, (WhitespaceTokenizer(),) * 2
    )
    assert results.metrics["test/bleu"] == pytest.approx(100 * 0.5**0.25)
    assert results.metrics["test/rouge1"] == pytest.approx(100 * f1(4 / 5, 4 / 5))  # b c d e
    assert results.metrics["test/ter"] == pytest.approx(100 * 1 / 5)  # z -> a
    assert results.details["references_per_sentence"] == 2
    assert "nrefs:2" in results.details["ter_signature"]
