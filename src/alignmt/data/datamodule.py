"""From a corpus to length-bucketed batches: tokenise, build vocabularies, encode, batch."""

from __future__ import annotations

import logging

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from alignmt.data.batching import EncodedPairs, LengthBucketSampler, collate
from alignmt.data.corpus import ParallelText
from alignmt.data.tokenizers import WhitespaceTokenizer
from alignmt.data.vocab import Vocabulary

log = logging.getLogger(__name__)

EVAL_SPLITS = ("valid", "test")


class TranslationDataModule(pl.LightningDataModule):
    """Owns the text of every split, the tokenisers and the vocabularies.

    Training pairs with an empty side or longer than `max_length` tokens on either side are
    dropped (and counted in the log); validation and test pairs are never dropped, so scores
    are always over the whole split. Vocabularies come from the training split, or from a
    checkpoint (`set_vocabularies`) when evaluating.
    """

    def __init__(
        self,
        corpus,
        tokenizer=None,
        target_tokenizer=None,
        source_vocab_size: int | None = None,
        target_vocab_size: int | None = None,
        min_freq: int = 1,
        max_length: int | None = 80,
        batch_size: int = 64,
        max_tokens: int | None = None,
        eval_batch_size: int = 128,
        pool_batches: int = 100,
        num_workers: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        self.corpus = corpus
        self.source_tokenizer = tokenizer or WhitespaceTokenizer()
        self.target_tokenizer = target_tokenizer or self.source_tokenizer
        self.source_vocab_size = source_vocab_size
        self.target_vocab_size = target_vocab_size
        self.min_freq = min_freq
        self.max_length = max_length
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.eval_batch_size = eval_batch_size
        self.pool_batches = pool_batches
        self.num_workers = num_workers
        self.seed = seed
        self.source_vocab: Vocabulary | None = None
        self.target_vocab: Vocabulary | None = None
        self.text: dict[str, ParallelText] = {}
        self.pairs: dict[str, EncodedPairs] = {}

    def prepare_data(self) -> None:
        prepare = getattr(self.corpus, "prepare", None)
        if prepare is not None:
            prepare()

    def set_vocabularies(self, source: Vocabulary, target: Vocabulary) -> None:
        self.source_vocab, self.target_vocab = source, target

    def setup(self, stage: str | None = None) -> None:
        splits = ("train", *EVAL_SPLITS) if stage in (None, "fit") else EVAL_SPLITS
        todo = [s for s in splits if s not in self.pairs]
        if not todo:
            return
        tokenized = {}
        for split in todo:
            text = self.text.get(split) or self.corpus.load(split)
            sources = [self.source_tokenizer.tokenize(s) for s in text.sources]
            targets = [self.target_tokenizer.tokenize(t) for t in text.targets]
            if split == "train":
                text, sources, targets = self._filter_train(text, sources, targets)
            self.text[split] = text
            tokenized[split] = (sources, targets)
        if self.source_vocab is None:
            if "train" not in tokenized:
                raise RuntimeError("no vocabularies: set them from a checkpoint or set up 'fit'")
            sources, targets = tokenized["train"]
            self.source_vocab = Vocabulary.build(sources, self.source_vocab_size, self.min_freq)
            self.target_vocab = Vocabulary.build(targets, self.target_vocab_size, self.min_freq)
            log.info(
                "vocabularies: %d source, %d target types",
                len(self.source_vocab),
                len(self.target_vocab),
            )
        for split, (sources, targets) in tokenized.items():
            self.pairs[split] = EncodedPairs(
                [self.source_vocab.encode(s) for s in sources],
                [self.target_vocab.encode(t) for t in targets],
            )

    def _filter_train(self, text: ParallelText, sources, targets):
        keep, empty, long = [], 0, 0
        for i, (s, t) in enumerate(zip(sources, targets, strict=True)):
            if not s or not t:
                empty += 1
            elif self.max_length is not None and max(len(s), len(t)) > self.max_length:
                long += 1
            else:
                keep.append(i)
        if empty or long:
            log.info(
                "training data %s: dropped %d pairs with an empty side and %d longer than "
                "data.max_length=%s tokens; %d remain",
                text.origin,
                empty,
                long,
                self.max_length,
                len(keep),
            )
        if not keep:
            raise ValueError(f"no training pairs left in {text.origin} after filtering")
        if len(keep) == len(sources):
            return text, sources, targets
        text = ParallelText(
            [text.sources[i] for i in keep],
            [text.targets[i] for i in keep],
            None if text.alignments is None else [text.alignments[i] for i in keep],
            text.origin,
        )
        return text, [sources[i] for i in keep], [targets[i] for i in keep]

    def _world(self) -> tuple[int, int]:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size(), torch.distributed.get_rank()
        return 1, 0

    def _loader(self, split: str, train: bool) -> DataLoader:
        pairs = self.pairs[split]
        world_size, rank = self._world()
        sampler = LengthBucketSampler(
            pairs.lengths(),
            batch_size=self.batch_size if train else self.eval_batch_size,
            max_tokens=self.max_tokens if train else None,
            shuffle=train,
            seed=self.seed,
            pool_batches=self.pool_batches,
            world_size=world_size,
            rank=rank,
        )
        return DataLoader(
            pairs,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)
