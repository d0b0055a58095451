"""Adding an attention variant is one class (and one YAML file): a variant with a window and
a state of its own, defined here, runs through teacher forcing, greedy and beam search, and
coverage, with nothing else written for it."""

import torch

from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import Attention
from alignmt.models.coverage import LinguisticCoverage


class TrailingWindow(Attention):
    """Dot-product scores over the `width` source positions behind a pointer that advances
    one word per step: a stateful, windowed variant."""

    def __init__(self, query_size: int, key_size: int, width: int = 2):
        super().__init__(query_size, key_size)
        self.width = width
        self.proj = torch.nn.Linear(query_size, key_size, bias=False)

    def score(self, query, keys, state):
        return torch.bmm(self.proj(query), keys.transpose(1, 2))

    def start_state(self, values, mask):
        return {"pointer": torch.zeros(values.size(0), dtype=torch.long)}

    def next_state(self, state, steps):
        return {**state, "pointer": state["pointer"] + steps}

    def window(self, query, mask, state):
        steps = state["pointer"].unsqueeze(1) + torch.arange(query.size(1))  # [B, T]
        last = mask.sum(-1, keepdim=True) - 1
        pointer = torch.minimum(steps, last).unsqueeze(-1)  # [B, T, 1]
        positions = torch.arange(mask.size(1))
        inside = (positions <= pointer) & (positions > pointer - self.width)
        return inside & mask.unsqueeze(1), None


def batch():
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 8, 9, 0, 0]])
    return src, torch.tensor([5, 3]), tgt_in


def check(model):
    model.eval()
    src, lengths, tgt_in = batch()
    out = model(src, lengths, tgt_in)  # teacher forcing (one call or the step path)
    memory, state = model.start(src, lengths)
    stepped = []
    for t in range(tgt_in.size(1)):
        _, state, alpha = model.step(tgt_in[:, t], memory, state)
        stepped.append(alpha)
        pointer = min(t, int(lengths[0]) - 1)
        outside = [j for j in range(5) if not pointer - 2 < j <= pointer]
        assert torch.all(alpha[0, outside] == 0)  # the window holds
    torch.testing.assert_close(out.attention, torch.stack(stepped, 1), atol=1e-5, rtol=1e-5)
    greedy = GreedySearch(max_length_offset=4)(model, src, lengths)
    beam = BeamSearch(beam_size=3, max_length_offset=4)(model, src, lengths)
    one = BeamSearch(beam_size=1, max_length_offset=4, stopping="early")(model, src, lengths)
    assert [h[0].tokens for h in one] == [h[0].tokens for h in greedy]
    for nbest in beam:
        attention = nbest[0].attention
        assert attention.shape[0] == len(nbest[0].tokens) + 1  # one row per word and [EOS]


def test_a_new_variant_runs_in_every_decoder_and_search():
    torch.manual_seed(0)
    check(Luong(20, 20, 8, 8, 1, attention=TrailingWindow, input_feeding=False))
    check(Luong(20, 20, 8, 8, 1, attention=TrailingWindow, input_feeding=True))
    check(RNNSearch(20, 20, 8, 4, 8, 4, attention=TrailingWindow))


def test_a_new_variant_composes_with_coverage():
    torch.manual_seed(0)
    model = RNNSearch(20, 20, 8, 4, 8, 4, attention=TrailingWindow, coverage=LinguisticCoverage)
    check(model)
    src, lengths, tgt_in = batch()
    memory, state = model.start(src, lengths)
    total = torch.zeros(2, 5)
    for t in range(3):
        _, state, alpha = model.step(tgt_in[:, t], memory, state)
        total += alpha / state["attention"]["coverage"]["fertility"].squeeze(-1)
    torch.testing.assert_close(state["attention"]["coverage"]["coverage"].squeeze(-1), total)
