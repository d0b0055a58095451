"""Batched greedy search (finished sentences leave the batch) against a plain loop."""

from functools import partial

import pytest
import torch

from alignmt.decoding import GreedySearch
from alignmt.models import Luong, RNNEncDec, RNNSearch
from alignmt.models.attention import AdditiveAttention, GeneralAttention
from alignmt.special_tokens import BOS_ID, EOS_ID


def reference_greedy(model, src, src_lengths, limit):
    """One sentence at a time, every step until the limit: the unoptimised search."""
    outputs = []
    for b in range(len(src)):
        s = src[b : b + 1, : int(src_lengths[b])]
        memory, state = model.start(s, src_lengths[b : b + 1])
        prev, tokens = torch.tensor([BOS_ID]), []
        for t in range(int(limit[b]) + 1):
            logits, state, _ = model.step(prev, memory, state)
            prev = logits.argmax(-1) if t < limit[b] else torch.tensor([EOS_ID])
            if int(prev) == EOS_ID:
                break
            tokens.append(int(prev))
        outputs.append(tokens)
    return outputs


MODELS = {
    "rnnsearch": lambda: RNNSearch(40, 30, 8, 6, 10, 4, attention=partial(AdditiveAttention)),
    "rnnencdec": lambda: RNNEncDec(40, 30, 8, 6, 10, 4),
    "luong": lambda: Luong(40, 30, 8, 10, 2, rnn_type="gru", attention=GeneralAttention),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_batched_greedy_equals_one_sentence_at_a_time(name):
    torch.manual_seed(3)
    model = MODELS[name]().eval()
    for p in model.parameters():  # sharper distributions: outputs of varied lengths
        p.data *= 3
    src_lengths = torch.tensor([7, 2, 5, 9, 3, 6])
    src = torch.randint(4, 40, (6, 9))
    src[torch.arange(9) >= src_lengths[:, None]] = 0
    src[torch.arange(6), src_lengths - 1] = EOS_ID
    search = GreedySearch(max_length_ratio=1.5, max_length_offset=2)
    got = [nbest[0].tokens for nbest in search(model, src, src_lengths)]
    limit = ((src_lengths - 1) * 1.5 + 2).ceil().long()
    with torch.inference_mode():
        expected = reference_greedy(model, src, src_lengths, limit)
    assert got == expected
    assert len({len(tokens) for tokens in got}) > 1  # sentences did finish at different steps


def test_greedy_breaks_ties_at_the_lowest_word_id_as_argmax_does():
    torch.manual_seed(3)
    model = MODELS["luong"]().eval()
    output = model.decoder.output
    with torch.no_grad():  # words 7 and 5 tie for the best logit at every step
        output.weight.zero_()
        output.bias.zero_()
        output.bias[[7, 5]] = 3.0
    src, src_lengths = torch.tensor([[9, 8, EOS_ID]]), torch.tensor([3])
    got = GreedySearch(max_length=4)(model, src, src_lengths)[0][0]
    assert got.tokens == [5, 5, 5, 5]


@pytest.mark.parametrize("name", ["luong", "rnnsearch"])
@torch.inference_mode()
def test_scores_and_attention_are_the_models_along_each_output(name):
    """Teacher forcing each output through the model gives back its attention row by row and
    its score, the sum of the log-probabilities of its words and [EOS]: for sentences that stop
    at different steps, so that rows written while every row runs and after some have left
    the batch are both checked."""
    torch.manual_seed(3)
    model = MODELS[name]().eval()
    for p in model.parameters():
        p.data *= 3
    src_lengths = torch.tensor([7, 2, 5, 9, 3, 6])
    src = torch.randint(4, 40, (6, 9))
    src[torch.arange(9) >= src_lengths[:, None]] = 0
    src[torch.arange(6), src_lengths - 1] = EOS_ID
    decoded = GreedySearch(max_length_ratio=1.5, max_length_offset=2)(model, src, src_lengths)
    assert len({len(nbest[0].tokens) for nbest in decoded}) > 1
    for b, [h] in enumerate(decoded):
        n = int(src_lengths[b])
        words = torch.tensor([*h.tokens, EOS_ID])
        out = model(src[b : b + 1, :n], src_lengths[b : b + 1], torch.tensor([[BOS_ID, *h.tokens]]))
        log_probs = torch.log_softmax(out.logits[0].float(), dim=-1)
        assert h.score == pytest.approx(float(log_probs.gather(1, words[:, None]).sum()), abs=1e-4)
        torch.testing.assert_close(h.attention, out.attention[0, :, :n], rtol=1e-4, atol=1e-5)
