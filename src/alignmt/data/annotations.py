"""What some models and losses need of a batch beside its ids, looked up by the batch's indices:
gold alignment links (supervised attention) and ids in an extended target vocabulary (copying).

The extended vocabulary of a sentence is the target vocabulary followed by the distinct source
tokens that are not in it, in order of first occurrence (See et al. 2017's per-example
"article OOVs"; here source and target vocabularies differ, so a source word the source
vocabulary knows but the target vocabulary does not is copied through an extended id too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from alignmt.data.batching import Batch
from alignmt.data.corpus import ParallelText
from alignmt.data.vocab import Vocabulary
from alignmt.evaluation.alignment import parse_gold
from alignmt.special_tokens import EOS_ID, PAD_ID, UNK_ID


@dataclass
class CopyIds:
    """One sentence in its extended target vocabulary."""

    source: list[int]  # each source token's id, then [EOS]
    target: list[int]  # each target token's id (extended where copyable, else [UNK]), [EOS]
    words: list[str]  # the words of the extended ids V, V + 1, ...


def copy_ids(
    source_tokens: Sequence[str], target_tokens: Sequence[str], target_vocab: Vocabulary
) -> CopyIds:
    """A sentence's ids in its extended target vocabulary. A target token outside the target
    vocabulary that occurs in the source gets its extended id: the word a copy produces."""
    stoi, size = target_vocab.stoi, len(target_vocab)
    extended: dict[str, int] = {}
    source = []
    for token in source_tokens:
        known = stoi.get(token)
        if known is None:
            known = extended.setdefault(token, size + len(extended))
        source.append(known)
    target = [stoi.get(token, extended.get(token, UNK_ID)) for token in target_tokens]
    return CopyIds([*source, EOS_ID], [*target, EOS_ID], list(extended))


def with_copy_ids(batch: Batch, sentences: Sequence[CopyIds]) -> Batch:
    """`batch` with its copy ids (`src_copy`, `tgt_copy`, `extended_words`), padded as its ids."""
    src_copy = torch.full_like(batch.src, PAD_ID, device="cpu")
    tgt_copy = torch.full_like(batch.tgt_out, PAD_ID, device="cpu")
    target_lengths = (batch.tgt_out != PAD_ID).sum(1).tolist()
    for row, ids in enumerate(sentences):
        lengths = (len(ids.source), len(ids.target))
        if lengths != (int(batch.src_lengths[row]), target_lengths[row]):
            raise ValueError(
                f"copy ids of {lengths[0]} source and {lengths[1]} target tokens for a pair of "
                f"{int(batch.src_lengths[row])} and {target_lengths[row]} (with [EOS]): they "
                "must come from the tokens the pair was encoded from"
            )
        src_copy[row, : len(ids.source)] = torch.tensor(ids.source)
        tgt_copy[row, : len(ids.target)] = torch.tensor(ids.target)  # [EOS] alone if no target
    return replace(
        batch,
        src_copy=src_copy.to(batch.src.device),
        tgt_copy=tgt_copy.to(batch.tgt_out.device),
        extended_words=[ids.words for ids in sentences],
    )


def gold_links(
    line: str, source_word_ids: Sequence[int], target_word_ids: Sequence[int]
) -> np.ndarray:
    """[target tokens, source tokens] with 1 where the tokens' words are linked by the sure
    links of a gold line (`i-j`: source word i, target word j). `*_word_ids[k]`: the word
    token k comes from (identity where the gold indexes tokens)."""
    sure, _ = parse_gold(line)
    source, target = np.asarray(source_word_ids, int), np.asarray(target_word_ids, int)
    words = np.zeros((target.max(initial=-1) + 1, source.max(initial=-1) + 1))
    for i, j in sure:
        if i >= words.shape[1] or j >= words.shape[0]:
            raise ValueError(
                f"link {i}-{j} of gold alignment {line!r} is outside a pair of "
                f"{words.shape[1]} source and {words.shape[0]} target words"
            )
        words[j, i] = 1.0
    return words[np.ix_(target, source)]


class BatchAnnotations:
    """Adds gold alignments (`gold`) and copy ids (`copy`) to the batches of one split.

    `tokens` is the split's tokenised Arrow dataset (`source_tokens`, `target_tokens`) and
    `rows[i]` its row of pair i, in it and in `text`, the split's text, whose gold lines
    index words (`alignment_unit="words"`, mapped to tokens by the tokenisers' `word_ids`)
    or tokens."""

    def __init__(
        self,
        tokens,
        rows: np.ndarray,
        text: ParallelText,
        target_vocab: Vocabulary,
        tokenizers: tuple,
        alignment_unit: str = "words",
        gold: bool = False,
        copy: bool = False,
    ):
        if gold and text.alignments is None:
            raise ValueError(
                f"task.alignment_loss_weight needs gold alignments, and {text.origin} has none"
            )
        self.tokens = tokens.select_columns(["source_tokens", "target_tokens"])
        self.rows = np.asarray(rows)
        self.text = text
        self.target_vocab = target_vocab
        self.tokenizers = tokenizers
        self.alignment_unit = alignment_unit
        self.gold = gold
        self.copy = copy

    def __call__(self, batch: Batch) -> Batch:
        pairs = batch.indices.tolist()
        if self.copy:
            rows = self.tokens[[int(self.rows[i]) for i in pairs]]
            tokens = zip(rows["source_tokens"], rows["target_tokens"], strict=True)
            batch = with_copy_ids(batch, [copy_ids(s, t, self.target_vocab) for s, t in tokens])
        if self.gold:
            batch = replace(batch, alignment=self._alignment(batch, pairs))
        return batch

    def _alignment(self, batch: Batch, pairs: list[int]) -> torch.Tensor:
        """[B, T, S]: rows are the output positions (no link for [EOS]), columns the source."""
        gold = torch.zeros(*batch.tgt_out.shape, batch.src.size(1))
        target_lengths = ((batch.tgt_out != PAD_ID).sum(1) - 1).tolist()
        source_lengths = (batch.src_lengths - 1).tolist()
        source_tokenizer, target_tokenizer = self.tokenizers
        for row, pair in enumerate(pairs):
            i = int(self.rows[pair])
            S, T = source_lengths[row], target_lengths[row]
            if self.alignment_unit == "words":
                source = source_tokenizer.word_ids(self.text.sources[i])
                target = target_tokenizer.word_ids(self.text.targets[i])
            else:
                source, target = range(S), range(T)
            if (len(source), len(target)) != (S, T):
                raise ValueError(
                    f"pair {i} of {self.text.origin}: the tokenisers' word ids cover "
                    f"{len(source)} + {len(target)} tokens, the batch holds {S} + {T}"
                )
            links = gold_links(self.text.alignments[i], source, target)
            gold[row, :T, :S] = torch.from_numpy(links)
        return gold.to(batch.tgt_out.device)
