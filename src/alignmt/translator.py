"""Raw sentences in, detokenised translations out: a model with its vocabularies and a search."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alignmt.data.annotations import copy_ids, with_copy_ids
from alignmt.data.batching import Batch, EncodedPairs, LengthBucketSampler, collate
from alignmt.data.vocab import Vocabulary
from alignmt.decoding.hypothesis import Hypothesis
from alignmt.decoding.unk import UnkReplacer
from alignmt.models.copy import WithSourceCopy
from alignmt.models.seq2seq import Seq2Seq
from alignmt.special_tokens import EOS, UNK_ID


@dataclass
class Translation:
    """One output with what explains it. Owns its storage (the attention is a copy), so a list
    of translations pickles compactly when gathered across processes."""

    source_tokens: list[str]  # as the model saw them ([UNK] for unknown words), without [EOS]
    source_words: list[str]  # as the tokeniser gave them (unknown words kept), without [EOS]
    ids: list[int]  # output ids as decoded (before [UNK] replacement; copies extended), no [EOS]
    tokens: list[str]  # output tokens (copied words, [UNK] replaced if on), without [EOS]
    text: str  # detokenised output
    score: float
    attention: np.ndarray | None  # [len(tokens) + 1, len(source_tokens) + 1], [EOS] included
    same_without_unk: bool = False  # the search with [UNK] forbidden returns it too

    @property
    def source_labels(self) -> list[str]:
        return [*self.source_tokens, EOS]

    @property
    def target_labels(self) -> list[str]:
        return [*self.tokens, EOS]


class Translator:
    """Wraps a model, its vocabularies, its tokenisers and a search strategy (greedy, beam).

    With an `unk_replacer`, generated [UNK]s become source words; that needs the source
    words themselves (tokeniser output), which the vocabulary has lost for unknown words, so
    `decode_batch` takes them beside the ids. A copying model's batches carry the words of
    their extended ids (`Batch.extended_words`), which become the copied output words.
    """

    def __init__(
        self,
        model: Seq2Seq,
        search,
        source_vocab: Vocabulary,
        target_vocab: Vocabulary,
        source_tokenizer,
        target_tokenizer,
        unk_replacer: UnkReplacer | None = None,
    ):
        if unk_replacer is not None and not model.has_attention:
            raise ValueError("[UNK] replacement needs a model with attention")
        self.model = model
        self.search = search
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.unk_replacer = unk_replacer

    def _translation(
        self,
        source_ids: list[int],
        source_words: list[str] | None,
        hypothesis: Hypothesis,
        extended_words: list[str] | None = None,
    ) -> Translation:
        source_tokens = self.source_vocab.decode(source_ids)
        if source_words is None:
            source_words = source_tokens
        tokens = self._target_tokens(hypothesis.tokens, extended_words or [])
        attention = None
        if hypothesis.attention is not None:
            attention = hypothesis.attention.float().numpy().copy()
        if self.unk_replacer is not None:
            is_unk = [i == UNK_ID for i in hypothesis.tokens]
            tokens = self.unk_replacer(tokens, is_unk, source_words, hypothesis.attention)
        return Translation(
            source_tokens=source_tokens,
            source_words=source_words,
            ids=list(hypothesis.tokens),
            tokens=tokens,
            text=self.target_tokenizer.detokenize(tokens),
            score=hypothesis.score,
            attention=attention,
            same_without_unk=hypothesis.same_without_unk,
        )

    def _target_tokens(self, ids: list[int], extended_words: list[str]) -> list[str]:
        """Output tokens: the target vocabulary's, then, for a copying model, the words of the
        extended ids (an extended id past this sentence's words, which only a search that has
        ruled out everything else could choose, reads as [UNK])."""
        size = len(self.target_vocab)
        known = [i if i < size else UNK_ID for i in ids]
        tokens = self.target_vocab.decode(known)
        if known == ids:
            return tokens
        # A hypothesis holds no [PAD], [BOS] or [EOS], so its tokens are its ids, one each.
        extended = range(size, size + len(extended_words))
        return [
            extended_words[i - size] if i in extended else token
            for token, i in zip(tokens, ids, strict=True)
        ]

    def decode_batch(
        self,
        batch: Batch,
        source_words: list[list[str]] | None = None,
        forbid_unk: bool = False,
    ) -> list[list[Translation]]:
        """The n-best list (length 1 for greedy search) of every sentence, in batch order.
        `source_words`: each sentence's tokeniser output, for [UNK] replacement; `forbid_unk`:
        never output [UNK] (the paper's "No UNK" evaluation)."""
        options = {"forbid_unk": True} if forbid_unk else {}
        model = self.model
        if batch.src_copy is not None:
            model = WithSourceCopy(model, batch.src_copy)
        nbest = self.search(model, batch.src, batch.src_lengths, **options)
        sources = batch.src.cpu().tolist()
        words = source_words or [None] * len(sources)
        extended = batch.extended_words or [None] * len(sources)
        return [
            [self._translation(sources[b], words[b], h, extended[b]) for h in hyps]
            for b, hyps in enumerate(nbest)
        ]

    def translate(self, sentences: list[str], batch_size: int = 64) -> list[list[Translation]]:
        """Translate raw sentences (batched by length, returned in input order)."""
        words = [self.source_tokenizer.tokenize(s) for s in sentences]
        pairs = EncodedPairs([self.source_vocab.encode(w) for w in words], [[] for _ in words])
        device = next(self.model.parameters()).device
        results: list[list[Translation] | None] = [None] * len(sentences)
        for indices in LengthBucketSampler(pairs.lengths(), batch_size, shuffle=False):
            batch = collate([pairs[i] for i in indices])
            if self.model.copies_source:
                ids = [copy_ids(words[i], [], self.target_vocab) for i in indices]
                batch = with_copy_ids(batch, ids)
            batch = batch.to(device)
            translations = self.decode_batch(batch, [words[i] for i in indices])
            for i, nbest in zip(indices, translations, strict=True):
                results[i] = nbest
        return results  # type: ignore[return-value]
