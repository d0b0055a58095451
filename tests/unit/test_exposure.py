"""The exposure-bias probe on a model whose behaviour is known."""

import numpy as np
import pytest
import torch

from alignmt.decoding import GreedySearch
from alignmt.evaluation.exposure import exposure_curves
from alignmt.evaluation.source_coverage import source_coverage_errors
from alignmt.models.seq2seq import DecoderOutput, Memory
from alignmt.plots import plot_exposure
from alignmt.special_tokens import BOS_ID, EOS_ID

WRONG = 4
VOCAB = 12


class FlawedCopier(torch.nn.Module):
    """Copies the source, but always gets position 2 wrong and, once anything it was fed
    differs from the source, gets every later word wrong too."""

    has_attention = False

    def start(self, src, src_lengths):
        memory = Memory(src.unsqueeze(-1).float(), None, src != 0)
        state = {
            "t": torch.zeros(len(src), dtype=torch.long),
            "ok": torch.ones(len(src), dtype=torch.bool),
        }
        return memory, state

    def step(self, prev, memory, state):
        src = memory.values.squeeze(-1).long()
        t, ok = state["t"], state["ok"]
        if bool((t > 0).any()):  # the word fed at t was meant to be the source word t-1
            last = src.size(1) - 1
            expected = src.gather(1, (t - 1).clamp(0, last).unsqueeze(1)).squeeze(1)
            ok = ok & ((t == 0) | (prev == expected))
        target = src.gather(1, t.clamp(max=src.size(1) - 1).unsqueeze(1)).squeeze(1)
        best = torch.where(ok & (t != 2), target, torch.full_like(target, WRONG))
        logits = torch.full((len(src), VOCAB), -10.0)
        logits.scatter_(1, best.unsqueeze(1), 10.0)
        return logits, {"t": t + 1, "ok": ok}, None

    def forward(self, src, src_lengths, tgt_in):
        memory, state = self.start(src, src_lengths)
        logits = []
        for t in range(tgt_in.size(1)):
            step_logits, state, _ = self.step(tgt_in[:, t], memory, state)
            logits.append(step_logits)
        return DecoderOutput(torch.stack(logits, 1), None)


def test_the_probe_separates_gold_prefixes_from_own_prefixes(tmp_path):
    model = FlawedCopier()
    src = torch.tensor([[5, 6, 7, 8, 9, EOS_ID]] * 3)
    lengths = torch.full((3,), 6)
    tgt_out = src.clone()
    tgt_in = torch.cat([torch.full((3, 1), BOS_ID), src[:, :-1]], 1)
    teacher_forced = model(src, lengths, tgt_in).logits.argmax(-1)
    hypotheses = GreedySearch(max_length_ratio=2.0, max_length_offset=0)(model, src, lengths)
    free = [[*nbest[0].tokens, EOS_ID] for nbest in hypotheses]
    curves = exposure_curves(tgt_out.tolist(), teacher_forced.tolist(), free)
    np.testing.assert_array_equal(curves.teacher_forced, [1, 1, 0, 1, 1, 1])
    np.testing.assert_array_equal(curves.free_running, [1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(curves.error_free, [1, 1, 0, 0, 0, 0])
    summary = curves.summary()
    assert summary["teacher_forced_accuracy"] == pytest.approx(5 / 6)
    assert summary["free_running_accuracy"] == pytest.approx(2 / 6)
    assert summary["gap"] == pytest.approx(3 / 6)
    curves.write_csv(tmp_path / "exposure.csv")
    assert len((tmp_path / "exposure.csv").read_text().splitlines()) == 7
    assert plot_exposure(curves, tmp_path / "exposure.png").read_bytes()[:4] == b"\x89PNG"


def test_the_probe_weights_positions_by_the_sentences_that_reach_them():
    curves = exposure_curves([[5, 3], [5, 6, 3]], [[5, 3], [5, 7, 3]], [[5, 3], [5]])
    np.testing.assert_array_equal(curves.sentences, [2, 2, 1])
    np.testing.assert_array_equal(curves.teacher_forced, [1, 0.5, 1])
    np.testing.assert_array_equal(curves.free_running, [1, 0.5, 0])  # a short output misses
    with pytest.raises(ValueError, match="same, non-zero number"):
        exposure_curves([[1]], [], [[1]])


def test_dropped_and_repeated_source_words():
    once = np.eye(3)  # every word attended exactly once
    skipped = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # word 1 dropped,
    assert source_coverage_errors([once]) == {"dropped_words": 0.0, "repeated_words": 0.0}
    counts = source_coverage_errors([once, skipped])  # word 0 of the second repeated (2.0)
    assert counts == {"dropped_words": 1 / 6, "repeated_words": 1 / 6}
