"""The beam-search curse's measurements: hand-computed shares, and the reference scored by the
very score the beam ranks its outputs by."""

import math

import pytest
import torch

from alignmt.data.batching import Batch
from alignmt.decoding import BeamSearch
from alignmt.evaluation.search import (
    TOLERANCE,
    SearchOutcome,
    larger_beam_regressions,
    length_ratio,
    read_outcomes,
    reference_scores,
    search_metrics,
    write_outcomes,
)
from alignmt.models import RNNSearch
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def outcome(index, score, reference_score, words=3, cap=5, bleu=50.0, same=False, reach=True):
    return SearchOutcome(index, words, cap, score, 4, reference_score, reach, same, bleu)


def test_length_ratio_is_sacrebleus_sys_len_over_ref_len():
    assert length_ratio(["a b c", "d"], ["a b c d e", "f g h"]) == pytest.approx(4 / 8)
    assert length_ratio(["a, b"], ["a b"]) == pytest.approx(3 / 2)  # 13a splits the comma


def test_search_metrics_by_hand():
    outcomes = [
        outcome(0, -5.0, -4.0),  # the reference scores higher: a search error
        outcome(1, -5.0, -5.0 + TOLERANCE / 2),  # within the tolerance: a tie
        outcome(2, -5.0, -4.0, same=True),  # the output is the reference
        outcome(3, -5.0, -4.0, reach=False),  # the search could not return the reference
        outcome(4, -2.0, -4.0, words=0),  # empty, and better than the reference
        outcome(5, -9.0, -10.0, words=5),  # at its cap of 5 words: truncated
    ]
    metrics = search_metrics(outcomes)
    assert metrics["search_error_rate"] == pytest.approx(1 / 5)  # of the 5 reachable
    assert metrics["reference_unreachable_share"] == pytest.approx(1 / 6)
    assert metrics["empty_share"] == pytest.approx(1 / 6)
    assert metrics["truncated_share"] == pytest.approx(1 / 6)
    assert metrics["output_is_reference_share"] == pytest.approx(1 / 6)


def test_larger_beam_regressions_by_hand():
    small = [outcome(0, -5.0, 0, bleu=40), outcome(1, -5.0, 0, bleu=40), outcome(2, -5, 0)]
    large = [
        outcome(1, -4.0, 0, bleu=30),  # higher score, worse BLEU: the curse
        outcome(0, -4.0, 0, bleu=60),  # higher score, better BLEU
        outcome(2, -5.0, 0, bleu=10),  # the same score: not counted
    ]
    shares = larger_beam_regressions(small, large)
    assert shares == pytest.approx(
        {"higher_score_share": 2 / 3, "higher_score_worse_bleu_share": 1 / 3}
    )
    with pytest.raises(ValueError, match="same sentences"):
        larger_beam_regressions(small, large[:2])


def test_outcomes_round_trip_through_their_csv(tmp_path):
    outcomes = [outcome(0, -5.25, -4.5, same=True), outcome(7, -1.0, -3.0, reach=False)]
    write_outcomes(tmp_path / "search.csv", outcomes)
    assert read_outcomes(tmp_path / "search.csv") == outcomes


def model():
    torch.manual_seed(3)
    net = RNNSearch(20, 15, 16, 16, 24, 16).eval()
    with torch.no_grad():
        net.decoder.maxout.output.weight.mul_(4)
    return net


def as_references(src, src_lengths, outputs):
    """A batch whose references are the given outputs (word ids, without [EOS])."""
    T = max(len(y) for y in outputs) + 1
    tgt_in = torch.full((len(outputs), T), PAD_ID)
    tgt_out = torch.full((len(outputs), T), PAD_ID)
    for b, y in enumerate(outputs):
        tgt_in[b, : len(y) + 1] = torch.tensor([BOS_ID, *y])
        tgt_out[b, : len(y) + 1] = torch.tensor([*y, EOS_ID])
    return Batch(src, src_lengths, tgt_in, tgt_out, torch.arange(len(outputs)))


@pytest.mark.parametrize(
    ("alpha", "beta"), [(0.0, 0.0), (1.0, 0.0), (0.6, 0.0), (0.6, 0.2)], ids=str
)
def test_an_output_scored_as_a_reference_gets_the_beams_own_score(alpha, beta):
    net = model()
    src = torch.tensor([[5, 9, 7, 3, EOS_ID], [8, 6, EOS_ID, PAD_ID, PAD_ID]])
    lengths = torch.tensor([5, 3])
    search = BeamSearch(beam_size=4, nbest=3, length_penalty=alpha, coverage_penalty=beta)
    nbest = search(net, src, lengths)
    for rank in range(3):
        outputs = [hypotheses[rank] for hypotheses in nbest]
        batch = as_references(src, lengths, [h.tokens for h in outputs])
        scored = reference_scores(net, search, [batch])
        for b, h in enumerate(outputs):
            assert scored[b].ids == tuple(h.tokens)
            assert scored[b].score == pytest.approx(h.score, abs=1e-4)
            assert scored[b].cap == 2 * (int(lengths[b]) - 1) + 10 and scored[b].reachable


def test_references_the_search_cannot_write_are_unreachable():
    net, src, lengths = model(), torch.tensor([[5, EOS_ID]]), torch.tensor([2])
    long = as_references(src, lengths, [[6] * 13])  # cap: 2 * 1 + 10 = 12 words
    unknown = as_references(src, lengths, [[6, UNK_ID]])
    fits = as_references(src, lengths, [[6] * 12])
    beam = BeamSearch(beam_size=2)
    assert not reference_scores(net, beam, [long])[0].reachable
    assert reference_scores(net, beam, [fits])[0].reachable
    assert reference_scores(net, beam, [unknown])[0].reachable
    assert not reference_scores(net, BeamSearch(beam_size=2, forbid_unk=True), [unknown])[
        0
    ].reachable
    assert not reference_scores(net, BeamSearch(beam_size=2, min_length=3), [unknown])[0].reachable
    assert math.isfinite(reference_scores(net, beam, [long])[0].score)
