"""The searches' output rules against their definition, word by word."""

import math

import pytest
import torch

from alignmt.decoding.hypothesis import OutputRules
from alignmt.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def allowed(word: int, step: int, cap: int, min_length: int, banned: list[int]) -> bool:
    """Never a banned id; only [EOS] at the cap; [EOS] before min_length only at the cap."""
    if word in banned:
        return False
    if step >= cap:
        return word == EOS_ID
    return word != EOS_ID or step >= min_length


@pytest.mark.parametrize("min_length", [0, 3, 9])
@pytest.mark.parametrize("banned", [[PAD_ID, BOS_ID], [PAD_ID, BOS_ID, UNK_ID]])
def test_each_step_rules_out_exactly_what_the_definition_forbids(min_length, banned):
    """Rows whose caps come at different steps (and a min length before, between or after
    them); the caps are only asked for once some row may have reached its own."""
    limits = torch.tensor([4, 2, 7, 4])
    rules = OutputRules(limits, min_length, banned)
    V = 12
    for step in range(8):
        caps = limits if rules.some_at_cap(step) else None
        if caps is None:
            assert step < int(limits.min())
        log_probs = torch.randn(len(limits), V).log_softmax(-1)
        before = log_probs.clone()
        out = rules.constrain_(log_probs, step, caps)
        assert out is log_probs  # in place
        for row, cap in enumerate(limits.tolist()):
            for word in range(V):
                expected = (
                    before[row, word] if allowed(word, step, cap, min_length, banned) else -math.inf
                )
                assert out[row, word] == expected, (step, row, word)
