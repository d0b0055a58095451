"""The prefix-dependence probe on constructed models: one that reads only the prefix's length
(and the source) shows 0 for swapped prefixes; one that reads the last prefix word shows the
total variation and KL computed by hand."""

import math

import pytest
import torch
from torch import nn

from alignmt.data.batching import Batch
from alignmt.evaluation.prefix_dependence import prefix_dependence, prefix_dependence_over
from alignmt.models.seq2seq import DecoderOutput

V, C = 12, 2.0  # vocabulary size, the constructed models' logit for the word they favour


class LastWordModel(nn.Module):
    """Next-token logits C on the prefix's last word (the source is ignored)."""

    def forward(self, src, src_lengths, tgt_in, feed=None):
        return DecoderOutput(C * nn.functional.one_hot(tgt_in, V).float(), None)


class LengthModel(nn.Module):
    """Next-token logits C on a word fixed by the source's first word and the prefix length."""

    def forward(self, src, src_lengths, tgt_in, feed=None):
        t = torch.arange(tgt_in.size(1))
        favoured = (src[:, :1] + t) % V
        return DecoderOutput(C * nn.functional.one_hot(favoured, V).float(), None)


def batch(src, tgt_in) -> Batch:
    src, tgt_in = torch.tensor(src), torch.tensor(tgt_in)
    lengths = (src != 0).sum(1)
    return Batch(src, lengths, tgt_in, tgt_in, torch.arange(len(src)))


# Two sentences compared with each other. Prefix lengths t = 1, 2, 3 (both have 4 tgt_in tokens):
# t = 1: (5) vs (5): equal, left out; t = 2: (5, 6) vs (5, 8): last words differ;
# t = 3: (5, 6, 7) vs (5, 8, 7): the prefixes differ, their last words do not.
BATCH = batch([[4, 9, 3], [5, 9, 3]], [[2, 5, 6, 7], [2, 5, 8, 7]])
Z = math.exp(C) + V - 1
TV = (math.exp(C) - 1) / Z  # between softmax(C e_a) and softmax(C e_b), a != b
KL = C * (math.exp(C) - 1) / Z


def test_a_model_reading_the_last_word_changes_by_the_hand_computed_amount():
    summary = prefix_dependence(LastWordModel(), BATCH).summary()
    assert summary["prefix_positions"] == 4  # t = 2, 3 for each of the two sentences
    assert summary["prefix_tv"] == pytest.approx((TV + 0) / 2)
    assert summary["prefix_kl"] == pytest.approx((KL + 0) / 2)
    assert summary["prefix_tv"] == pytest.approx(0.17372, abs=1e-5)  # (e^2 - 1) / (e^2 + 11) / 2
    # It ignores the source: perturbing it changes nothing (t = 1, 2, 3, both sentences).
    assert summary["source_positions"] == 6 and summary["source_tv"] == 0.0


def test_a_model_reading_only_the_prefix_length_shows_zero():
    summary = prefix_dependence(LengthModel(), BATCH).summary()
    assert summary["prefix_positions"] == 4 and summary["prefix_tv"] == 0.0
    assert summary["prefix_kl"] == 0.0
    assert summary["source_tv"] == pytest.approx(TV)  # first source words 4 and 5 differ


def test_equal_sentences_and_lone_sentences_compare_nothing():
    same = batch([[4, 3], [4, 3]], [[2, 5, 6], [2, 5, 6]])
    summary = prefix_dependence(LastWordModel(), same).summary()
    assert summary["prefix_positions"] == summary["source_positions"] == 0
    assert math.isnan(summary["prefix_tv"])
    lone = batch([[4, 3]], [[2, 5, 6]])
    assert prefix_dependence(LastWordModel(), lone).summary()["prefix_positions"] == 0


def test_padding_never_counts_and_batches_add_up():
    # The second sentence has one word: only prefix length 1 is common, and it differs.
    ragged = batch([[4, 9, 3], [5, 3, 0]], [[2, 5, 6, 7], [2, 8, 0, 0]])
    summary = prefix_dependence(LastWordModel(), ragged).summary()
    assert summary["prefix_positions"] == 2 and summary["prefix_tv"] == pytest.approx(TV)
    total = prefix_dependence_over(LastWordModel(), [BATCH, ragged]).summary()
    assert total["prefix_positions"] == 6
    assert total["prefix_tv"] == pytest.approx((2 * TV + 2 * TV) / 6)
