"""A search step's most probable words under the output rules, and their log-probabilities.

Both searches need, per row, only the log-normaliser and a few best words: greedy search the
best, beam search the K best and [EOS]'s log P. PyTorch ops write the whole log-softmax, mask
it and run a top-k over the vocabulary: several passes over a [rows, V] tensor larger than a
core's cache, every step. One native pass (alignmt/native/top_words.c) reads each row twice
while it is in cache. Where it does not run (no compiler, `ALIGNMT_NATIVE=0`, logits not
float32 on CPU, fewer allowed words than asked for) the PyTorch ops do, for every step of the
search: the two agree to float32 rounding, and a search takes one of them throughout, so a
sentence scores the same in any batch.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import NamedTuple

import torch

from alignmt import native
from alignmt.decoding.hypothesis import OutputRules
from alignmt.native import pointer
from alignmt.special_tokens import EOS_ID


class TopWords(NamedTuple):
    log_probs: torch.Tensor  # [N, k] largest first
    words: torch.Tensor  # [N, k] int64, the lower id first on ties
    eos: torch.Tensor | None  # [N] [EOS]'s log P, where asked for


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = native.load("top_words")
    if lib is not None:
        pointer_, size = ctypes.c_void_p, ctypes.c_int64
        lib.top_words.argtypes = [pointer_, size, pointer_, size, size, size] + [pointer_] * 4
        lib.top_words.argtypes += [size, size]
    return lib


def step_words(
    logits: torch.Tensor,
    k: int,
    rules: OutputRules,
    step: int,
    caps: torch.Tensor | None,
    eos_apart: bool,
) -> TopWords:
    """Each row's k most probable words that output position `step` allows (`rules`, `caps`
    as OutputRules.constrain_ takes them), from float32 `logits` [N, V]. With `eos_apart`,
    [EOS] is left out of the k and its log P returned apart (-inf where ruled out; None where
    no row may end), as beam search ranks it; else it competes with the other words."""
    may_end = rules.may_end(step, caps)
    ruled_out = rules.banned_and_eos if eos_apart else rules.ruled_out(step)
    eos_id = EOS_ID if may_end and (eos_apart or caps is not None) else None
    top = top_words(logits, k, ruled_out, eos_id)
    if top is None:
        return _by_torch(logits, k, rules, step, caps, eos_apart)
    if caps is None:  # (without eos_apart, top.eos is None here: no [EOS] was asked for)
        return top
    at_cap = caps <= step  # such a row may hold [EOS] only, even before min_length
    if eos_apart:
        top.log_probs.masked_fill_(at_cap.unsqueeze(1), -math.inf)
        if step < rules.min_length:
            top.eos.masked_fill_(~at_cap, -math.inf)
        return top
    if bool(at_cap.any()):
        top.log_probs[at_cap] = -math.inf
        top.log_probs[at_cap, 0] = top.eos[at_cap]
        top.words[at_cap, 0] = EOS_ID
    return TopWords(top.log_probs, top.words, None)


def _by_torch(logits, k, rules, step, caps, eos_apart) -> TopWords:
    """step_words by PyTorch ops: the constrained log-softmax's best words."""
    log_probs = rules.constrain_(torch.log_softmax(logits, dim=-1), step, caps)
    if eos_apart:
        eos = log_probs[:, EOS_ID].clone() if rules.may_end(step, caps) else None
        log_probs[:, EOS_ID] = -math.inf
        return TopWords(*log_probs.topk(k, dim=1), eos)
    if k > 1:
        return TopWords(*log_probs.topk(k, dim=1), None)
    best, word = log_probs.max(dim=1)  # the first maximum, by a faster kernel than argmax's
    if caps is not None:
        word = torch.where(caps <= step, torch.full_like(word, EOS_ID), word)
        best = log_probs.gather(1, word.unsqueeze(1)).squeeze(1)
    return TopWords(best.unsqueeze(1), word.unsqueeze(1), None)


def top_words(
    logits: torch.Tensor, k: int, ruled_out: torch.Tensor, eos_id: int | None = None
) -> TopWords | None:
    """The k most probable words of each row of `logits` [N, V] other than the ids `ruled_out`
    (int64 on CPU), by log P under the whole distribution, and with `eos_id`, that word's
    log P (rule it out too to rank it apart). None where the native pass does not run."""
    N, V = logits.shape
    if (
        logits.dtype != torch.float32
        or logits.device.type != "cpu"
        or logits.stride(-1) != 1
        or V - ruled_out.numel() < k
        or library() is None
    ):
        return None
    ruled_out = ruled_out.contiguous()
    lse, log_probs = logits.new_empty(N), logits.new_empty(N, k)
    words = torch.empty(N, k, dtype=torch.long)
    eos = logits.new_empty(N) if eos_id is not None else None
    library().top_words(
        pointer(logits, rows=True), logits.stride(0), pointer(ruled_out), ruled_out.numel(),
        -1 if eos_id is None else eos_id, k,
        *map(pointer, (lse, log_probs, words, eos)), N, V,
    )  # fmt: skip
    return TopWords(log_probs, words, eos)
