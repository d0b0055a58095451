"""Ensembles against their definition: one member is that model, copies are one model, and the
distribution is the normalised geometric mean of the members' (attention: their mean)."""

import copy
from functools import partial

import pytest
import torch

from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.models import Luong, RNNEncDec, RNNSearch
from alignmt.models.attention import AdditiveAttention, GeneralAttention
from alignmt.models.ensemble import Ensemble
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID

V_SRC, V_TGT = 40, 30


def rnnsearch(seed):
    torch.manual_seed(seed)
    model = RNNSearch(V_SRC, V_TGT, 8, 6, 10, 4, attention=partial(AdditiveAttention)).eval()
    for p in model.parameters():  # sharper distributions: outputs of varied lengths
        p.data *= 3
    return model


def luong(seed):
    torch.manual_seed(seed)
    return Luong(V_SRC, V_TGT, 8, 10, 2, rnn_type="gru", attention=GeneralAttention).eval()


def rnnencdec(seed):
    torch.manual_seed(seed)
    return RNNEncDec(V_SRC, V_TGT, 8, 6, 10, 4).eval()


def batch():
    torch.manual_seed(0)
    src_lengths = torch.tensor([7, 2, 5, 9, 3, 6])
    src = torch.randint(4, V_SRC, (6, 9))
    src[torch.arange(9) >= src_lengths[:, None]] = 0
    src[torch.arange(6), src_lengths - 1] = EOS_ID
    return src, src_lengths


SEARCHES = {
    "greedy": lambda: GreedySearch(max_length_ratio=1.5, max_length_offset=2),
    "beam": lambda: BeamSearch(beam_size=3, nbest=3, max_length_ratio=1.5, max_length_offset=2),
}


def assert_same_nbest(got, expected):
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        assert [h.tokens for h in mine] == [h.tokens for h in theirs]
        assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-5)
        for a, b in zip(mine, theirs, strict=True):
            torch.testing.assert_close(a.attention, b.attention, atol=1e-6, rtol=0)


@pytest.mark.parametrize("search", sorted(SEARCHES))
@pytest.mark.parametrize("make", [rnnsearch, luong], ids=["rnnsearch", "luong"])
@pytest.mark.parametrize("copies", [1, 2])
def test_one_model_or_copies_of_it_decode_as_that_model(search, make, copies):
    model = make(1)
    ensemble = Ensemble([model] + [copy.deepcopy(model) for _ in range(copies - 1)])
    src, src_lengths = batch()
    decode = SEARCHES[search]()
    assert_same_nbest(decode(ensemble, src, src_lengths), decode(model, src, src_lengths))


@pytest.mark.parametrize("copies", [1, 2])
def test_teacher_forced_scores_of_one_model_or_copies_are_that_models(copies):
    model = rnnsearch(1)
    ensemble = Ensemble([copy.deepcopy(model) for _ in range(copies)])
    src, src_lengths = batch()
    tgt_in = torch.randint(4, V_TGT, (6, 5))
    with torch.no_grad():
        mine, theirs = ensemble(src, src_lengths, tgt_in), model(src, src_lengths, tgt_in)
    torch.testing.assert_close(
        mine.logits.log_softmax(-1), theirs.logits.log_softmax(-1), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(mine.attention, theirs.attention)


def test_the_distribution_is_the_normalised_geometric_mean_and_attention_the_mean():
    members = [rnnsearch(1), luong(2), rnnencdec(3)]
    ensemble = Ensemble(members)
    src, src_lengths = batch()
    tgt_in = torch.cat([torch.full((6, 1), BOS_ID), torch.randint(4, V_TGT, (6, 4))], 1)
    with torch.no_grad():
        got = ensemble(src, src_lengths, tgt_in)
        outputs = [m(src, src_lengths, tgt_in) for m in members]
    probs = [o.logits.double().softmax(-1) for o in outputs]
    geometric = (probs[0] * probs[1] * probs[2]) ** (1 / 3)
    expected = geometric / geometric.sum(-1, keepdim=True)
    torch.testing.assert_close(got.logits.double().softmax(-1), expected, atol=1e-6, rtol=0)
    # RNNEncDec has no attention: the mean is over the members that have some.
    assert ensemble.has_attention and not members[2].has_attention
    torch.testing.assert_close(got.attention, (outputs[0].attention + outputs[1].attention) / 2)


def test_greedy_search_picks_the_best_word_of_the_mean_distribution_at_every_step():
    members = [rnnsearch(1), rnnsearch(2)]
    ensemble = Ensemble(members)
    src, src_lengths = batch()
    search = GreedySearch(max_length_ratio=1.5, max_length_offset=2)
    got = [nbest[0].tokens for nbest in search(ensemble, src, src_lengths)]
    limits = ((src_lengths - 1) * 1.5 + 2).ceil().long().tolist()  # words, [EOS] not counted
    expected = []
    with torch.inference_mode():  # one sentence at a time, members stepped side by side
        for b in range(len(src)):
            s, n = src[b : b + 1, : int(src_lengths[b])], src_lengths[b : b + 1]
            started = [m.start(s, n) for m in members]
            memories, states = [m for m, _ in started], [s for _, s in started]
            prev, tokens = torch.tensor([BOS_ID]), []
            for _ in range(limits[b]):
                steps = [m.step(prev, memories[i], states[i]) for i, m in enumerate(members)]
                states = [state for _, state, _ in steps]
                mean = sum(logits.log_softmax(-1) for logits, _, _ in steps) / 2
                mean[:, [PAD_ID, BOS_ID]] = -torch.inf  # never output
                prev = mean.argmax(-1)
                if int(prev) == EOS_ID:
                    break
                tokens.append(int(prev))
            expected.append(tokens)
    assert got == expected
    assert len({len(t) for t in got}) > 1  # sentences left the batch at different steps


def test_beam_scores_are_the_ensembles_log_probabilities_of_its_outputs():
    """Beam search reorders each member's state; a wrong reordering scores another prefix."""
    ensemble = Ensemble([rnnsearch(1), luong(2)])
    src, src_lengths = batch()
    nbest = BeamSearch(beam_size=4, nbest=4, max_length=6)(ensemble, src, src_lengths)
    for b, hypotheses in enumerate(nbest):
        for h in hypotheses:
            tokens = torch.tensor([[BOS_ID, *h.tokens]])
            with torch.no_grad():
                forced = ensemble(src[b : b + 1], src_lengths[b : b + 1], tokens)
            log_probs = forced.logits.log_softmax(-1)[0]
            targets = torch.tensor([*h.tokens, EOS_ID])
            assert h.score == pytest.approx(float(log_probs.gather(1, targets[:, None]).sum()))


def test_an_ensemble_needs_a_model():
    with pytest.raises(ValueError, match="at least one model"):
        Ensemble([])
