"""Raw sentences in, detokenised translations out: a model with its vocabularies and a search."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from alignmt.data.batching import Batch, EncodedPairs, LengthBucketSampler, collate
from alignmt.data.vocab import EOS, Vocabulary
from alignmt.decoding.hypothesis import Hypothesis
from alignmt.models.seq2seq import Seq2Seq


@dataclass
class Translation:
    source_tokens: list[str]  # as the model saw them ([UNK] for unknown words), without [EOS]
    tokens: list[str]  # output tokens, without [EOS]
    text: str  # detokenised output
    score: float
    attention: torch.Tensor | None  # [len(tokens) + 1, len(source_tokens) + 1], [EOS] included

    @property
    def source_labels(self) -> list[str]:
        return [*self.source_tokens, EOS]

    @property
    def target_labels(self) -> list[str]:
        return [*self.tokens, EOS]


class Translator:
    """Wraps a model, its vocabularies, its tokenisers and a search strategy (greedy, beam)."""

    def __init__(
        self,
        model: Seq2Seq,
        search,
        source_vocab: Vocabulary,
        target_vocab: Vocabulary,
        source_tokenizer,
        target_tokenizer,
    ):
        self.model = model
        self.search = search
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer

    def _translation(self, source_ids: list[int], hypothesis: Hypothesis) -> Translation:
        tokens = self.target_vocab.decode(hypothesis.tokens)
        return Translation(
            source_tokens=self.source_vocab.decode(source_ids),
            tokens=tokens,
            text=self.target_tokenizer.detokenize(tokens),
            score=hypothesis.score,
            attention=hypothesis.attention,
        )

    def decode_batch(self, batch: Batch) -> list[list[Translation]]:
        """The n-best list (length 1 for greedy search) of every sentence, in batch order."""
        nbest = self.search(self.model, batch.src, batch.src_lengths)
        sources = batch.src.cpu().tolist()
        return [[self._translation(sources[b], h) for h in hyps] for b, hyps in enumerate(nbest)]

    def translate(self, sentences: list[str], batch_size: int = 64) -> list[list[Translation]]:
        """Translate raw sentences (batched by length, returned in input order)."""
        sources = [self.source_vocab.encode(self.source_tokenizer.tokenize(s)) for s in sentences]
        pairs = EncodedPairs(sources, [[] for _ in sources])
        device = next(self.model.parameters()).device
        results: list[list[Translation] | None] = [None] * len(sentences)
        for indices in LengthBucketSampler(pairs.lengths(), batch_size, shuffle=False):
            batch = collate([pairs[i] for i in indices])
            batch = Batch(
                batch.src.to(device), batch.src_lengths, batch.tgt_in, batch.tgt_out, batch.indices
            )
            for i, nbest in zip(indices, self.decode_batch(batch), strict=True):
                results[i] = nbest
        return results  # type: ignore[return-value]
