"""From a corpus to length-bucketed batches: tokenise, build vocabularies, encode, batch."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from itertools import islice
from pathlib import Path

import datasets
import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from alignmt.atomic import write_text
from alignmt.data import encoding
from alignmt.data.annotations import BatchAnnotations
from alignmt.data.batching import EncodedPairs, LengthBucketSampler
from alignmt.data.cache_lock import filling
from alignmt.data.corpus import ParallelText
from alignmt.data.curriculum import Curriculum
from alignmt.data.loader import ResumableLoader, evaluation_loader
from alignmt.data.streaming import PairEncoder, StreamedBatches
from alignmt.data.tokenizers import WhitespaceTokenizer
from alignmt.data.vocab import Vocabulary

log = logging.getLogger(__name__)

EVAL_SPLITS = ("valid", "test")


class TranslationDataModule(pl.LightningDataModule):
    """Owns the text of every split, the tokenisers and the vocabularies.

    Training pairs with an empty side or longer than `max_length` tokens on either side are
    dropped (and counted in the log); validation and test pairs are never dropped, so scores
    are always over the whole split. Tokenisers that learn (SentencePiece) are fitted on the
    training split; vocabularies hold its `*_vocab_size` most frequent tokens seen `min_freq`
    times; both come from a checkpoint instead when evaluating (`set_vocabularies`,
    `load_tokenizer_state`). Tokenised and encoded splits, SentencePiece models and
    vocabularies are cached under `cache_dir`, each entry filled by one process while the
    others (DDP ranks, SLURM tasks, other runs) wait and read it; `num_proc` processes
    tokenise and encode (None: every available core, for splits large enough to gain).
    A training split that a corpus streams (`corpus.stream("train")`) is read as it goes;
    its tokenisers and vocabularies are fitted on its first `stream_sample_size` pairs.
    `alignment_unit` says what the corpus's gold alignments index: the raw text's
    whitespace-separated `words` (attention over subwords or Moses tokens is summed into them
    before AER is taken) or the tokeniser's `tokens`.

    The training loader is reshuffled every epoch and resumable: Lightning checkpoints its
    place in the data order, counted in the batches training has taken (this module's
    `on_after_batch_transfer` reports each one), so a resumed run trains on the batches an
    uninterrupted one would have. A `curriculum` (`alignmt.data.curriculum`: steps, initial)
    makes the first epoch a short-sentences-first one.

    Batches can carry more than ids (`alignmt.data.annotations`): `copy_ids` adds every split's
    ids in a copying model's extended vocabulary (set by `model/copy=pointer_generator`), and
    `carry_gold_alignments()` (asked by a training task that supervises attention) adds the
    training pairs' gold alignment links.
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
        cache_dir: str = "~/.cache/alignmt",
        num_proc: int | None = None,
        stream_sample_size: int = 1_000_000,
        alignment_unit: str = "words",
        copy_ids: bool = False,
        curriculum: Curriculum | Mapping | None = None,
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
        self.cache_dir = Path(cache_dir).expanduser()
        self.num_proc = num_proc
        self.stream_sample_size = stream_sample_size
        self.alignment_unit = alignment_unit  # what gold alignments index: words or tokens
        self.copy_ids = copy_ids
        if curriculum is not None and not isinstance(curriculum, Curriculum):
            curriculum = Curriculum(**curriculum)
        self.curriculum = curriculum
        self.gold_alignments = False
        self.source_vocab: Vocabulary | None = None
        self.target_vocab: Vocabulary | None = None
        self.text: dict[str, ParallelText] = {}
        self.pairs: dict[str, EncodedPairs] = {}
        self.tokens: dict[str, datasets.Dataset] = {}  # tokenised splits, for annotations
        self.train_stream = None  # a datasets.IterableDataset when the corpus streams training
        self._train_loader: ResumableLoader | None = None

    # ------------------------------------------------------------ checkpoints
    def set_vocabularies(self, source: Vocabulary, target: Vocabulary) -> None:
        self.source_vocab, self.target_vocab = source, target

    def _learnt_tokenizers(self) -> dict:
        """The tokenisers with a learnt state, by side; a joint one only under 'source'."""
        sides = {"source": self.source_tokenizer}
        if self.target_tokenizer is not self.source_tokenizer:
            sides["target"] = self.target_tokenizer
        return {side: tok for side, tok in sides.items() if hasattr(tok, "state_dict")}

    def tokenizer_state(self) -> dict:
        """Plain values (SentencePiece models as bytes) for a checkpoint."""
        return {side: tok.state_dict() for side, tok in self._learnt_tokenizers().items()}

    def load_tokenizer_state(self, state: dict) -> None:
        for side, tok in self._learnt_tokenizers().items():
            if side not in state:
                raise ValueError(
                    f"the checkpoint has no state for the {side} tokeniser "
                    f"({type(tok).__name__}); it was trained with other data.tokenizer settings"
                )
            tok.load_state_dict(state[side])

    def oracle(self, split: str):
        """`oracle(i, prefix_ids)`: the right next target ids after any prefix of sentence i,
        where the corpus knows them (the counting language); None otherwise."""
        make = getattr(self.corpus, "oracle", None)
        return None if make is None else make(self.text[split].sources, self.target_vocab.stoi)

    # ----------------------------------------------------------------- set-up
    def prepare_data(self) -> None:
        """Download or generate the corpus and fill the caches (on one process under DDP)."""
        prepare = getattr(self.corpus, "prepare", None)
        if prepare is not None:
            prepare()
        self.setup("fit" if self.source_vocab is None else "test")

    def setup(self, stage: str | None = None) -> None:
        splits = ("train", *EVAL_SPLITS) if stage in (None, "fit") else EVAL_SPLITS
        todo = [s for s in splits if s not in self.pairs]
        if "train" in todo and self.train_stream is None:
            stream = getattr(self.corpus, "stream", None)
            self.train_stream = stream("train") if stream is not None else None
        if self.train_stream is not None and "train" in todo:
            self._check_stream_budget()
            todo.remove("train")  # read as training goes; only its first pairs are fitted on
        texts = {split: self._text(split) for split in todo}
        for split, text in texts.items():
            if not len(text):
                raise ValueError(f"the {split} data {text.origin} has no sentence pairs")
        if self.source_vocab is None:
            if self.train_stream is not None:
                texts["train"] = self._stream_sample()
            elif "train" not in texts:
                raise RuntimeError("no vocabularies: set them from a checkpoint or set up 'fit'")
        if not texts:
            return
        data = {split: text.to_dataset() for split, text in texts.items()}
        keys = {split: encoding.text_key(dataset) for split, dataset in data.items()}
        if "train" in data:
            self._fit_tokenizers(data["train"], keys["train"])
        tokens = {split: self._tokenize(split, data[split], keys[split]) for split in data}
        if "train" in tokens and self.source_vocab is None:
            self._build_vocabularies(*tokens["train"])
        for split in todo:
            tokenized, key = tokens[split]
            encoded = encoding.encode(
                tokenized,
                key,
                self.source_vocab,
                self.target_vocab,
                self.cache_dir / "encoded",
                self.num_proc,
                desc=f"encoding {split}",
            )
            pairs = EncodedPairs.from_arrow(encoded)
            keep = self._filter_train(texts[split].origin, pairs) if split == "train" else None
            self.pairs[split] = pairs if keep is None else pairs.kept(keep)
            self.tokens[split] = tokenized
            # training text stays whole (pair i at row pairs.index[i]): selecting the pairs
            # kept would cost memory per pair for what only annotations read
            self.text[split] = texts[split] if split == "train" else texts[split].as_lists()

    def _check_stream_budget(self) -> None:
        """A token budget must hold the longest pair a stream may bring, known only from
        `max_length`: checked at start-up, not when such a pair first turns up."""
        if self.max_tokens is None:
            return
        if self.max_length is None or self.max_length + 1 > self.max_tokens:
            raise ValueError(
                f"streamed training: data.max_tokens={self.max_tokens} must hold the longest "
                f"pair data.max_length={self.max_length} allows, with [EOS] "
                f"({'unbounded' if self.max_length is None else self.max_length + 1} tokens): "
                "raise data.max_tokens or set data.max_length below it"
            )

    def _text(self, split: str) -> ParallelText:
        text = self.text.get(split)
        return text if text is not None else self.corpus.load(split)

    def _stream_sample(self) -> ParallelText:
        """The first pairs of a streamed training split, for fitting tokenisers and vocabularies."""
        rows = list(islice(self.train_stream, self.stream_sample_size))
        if not rows:
            where = getattr(self.corpus, "path", None) or type(self.corpus).__name__
            raise ValueError(f"the training stream of {where} has no sentence pairs")
        log.info(
            "streamed training data: tokenisers and vocabularies from its first %d pairs", len(rows)
        )
        return ParallelText(
            [row["source"] for row in rows],
            [row["target"] for row in rows],
            origin=f"the first {len(rows)} pairs of the training stream",
        )

    def _fit_tokenizers(self, train: datasets.Dataset, train_key: str) -> None:
        """Train SentencePiece models on the training text (or load them from the cache).

        Where the text holds more sentences than a model trains on (`input_sentence_size`),
        a random sample seeded by `seed` is taken, and the seed joins the model's cache key;
        otherwise the model does not depend on the seed, and runs of any seed share it.
        """
        if self.source_tokenizer is self.target_tokenizer:
            sides = {"joint": (self.source_tokenizer, ("source", "target"))}
        else:
            sides = {
                "source": (self.source_tokenizer, ("source",)),
                "target": (self.target_tokenizer, ("target",)),
            }
        for side, (tokenizer, columns) in sides.items():
            if not hasattr(tokenizer, "fit") or tokenizer.trained:
                continue
            limit = tokenizer.options["input_sentence_size"]
            seed = self.seed if encoding.sampled(train, columns, limit) else None
            key = encoding.cache_key(train_key, side, tokenizer.training_key, seed)
            model_file = self.cache_dir / "sentencepiece" / f"{key}.model"
            tokenizer.fit(
                encoding.sentences(train, columns, limit, self.seed), model_file, self.seed
            )
            log.info("SentencePiece model (%s): %s", side, tokenizer.model_file or model_file)

    def _tokenize(self, split: str, dataset: datasets.Dataset, key: str):
        return encoding.tokenize(
            dataset,
            key,
            self.source_tokenizer,
            self.target_tokenizer,
            self.cache_dir / "tokenized",
            self.num_proc,
            desc=f"tokenising {split}",
        )

    def _filter_train(self, origin: str, pairs: EncodedPairs) -> np.ndarray:
        """Indices of the training pairs kept: both sides non-empty and within `max_length`
        (read from the ids, one per token: a warm start reads no tokenised text)."""
        source, target = pairs.sources.lengths(), pairs.targets.lengths()
        kept = encoding.trainable(source, target, self.max_length)
        empty = np.minimum(source, target) == 0
        long = ~kept & ~empty
        keep = np.flatnonzero(kept).astype(pairs.index.dtype)
        if len(keep) < len(source):
            log.info(
                "training data %s: dropped %d pairs with an empty side and %d longer than "
                "data.max_length=%s tokens; %d remain",
                origin,
                int(empty.sum()),
                int(long.sum()),
                self.max_length,
                len(keep),
            )
        if not len(keep):
            raise ValueError(f"no training pairs left in {origin} after filtering")
        return keep

    def _build_vocabularies(self, tokens: datasets.Dataset, key: str) -> None:
        """From the training pairs kept (`_filter_train`'s rule): all counts minus those of the
        dropped pairs. Counted once per cache (the token lists of the vocabularies are cached),
        read by the others."""
        sizes = (self.source_vocab_size, self.target_vocab_size)
        entry = (
            self.cache_dir
            / "vocabularies"
            / (encoding.cache_key("vocab", key, self.max_length, sizes, self.min_freq) + ".json")
        )
        with filling(entry):
            if not entry.is_file():
                itos = [vocab.itos for vocab in self._count_vocabularies(tokens)]
                write_text(entry, json.dumps(itos, ensure_ascii=False))
            source, target = json.loads(entry.read_text(encoding="utf-8"))
        self.source_vocab, self.target_vocab = Vocabulary(source), Vocabulary(target)
        log.info(
            "vocabularies: %d source, %d target types",
            len(self.source_vocab),
            len(self.target_vocab),
        )

    def _count_vocabularies(self, tokens: datasets.Dataset) -> list[Vocabulary]:
        source = encoding.list_lengths(tokens, "source_tokens")
        target = encoding.list_lengths(tokens, "target_tokens")
        dropped = np.flatnonzero(~encoding.trainable(source, target, self.max_length))
        vocabularies = []
        for column, size in (
            ("source_tokens", self.source_vocab_size),
            ("target_tokens", self.target_vocab_size),
        ):
            counts = encoding.token_counts(tokens, column)
            if len(dropped):
                counts.subtract(encoding.token_counts(tokens, column, rows=dropped))
            vocabularies.append(Vocabulary.from_counts(+counts, size, self.min_freq))
        return vocabularies

    # ------------------------------------------------------------ annotations
    def carry_gold_alignments(self) -> None:
        """Training batches will carry their pairs' gold alignment links (`Batch.alignment`)."""
        self.gold_alignments = True

    def _annotations(self, split: str, train: bool) -> BatchAnnotations | None:
        gold = train and self.gold_alignments
        if not (gold or self.copy_ids):
            return None
        return BatchAnnotations(
            self.tokens[split],
            self.pairs[split].index,
            self.text[split],
            self.target_vocab,
            (self.source_tokenizer, self.target_tokenizer),
            self.alignment_unit,
            gold=gold,
            copy=self.copy_ids,
        )

    # ------------------------------------------------------------ dataloaders
    def _world(self) -> tuple[int, int]:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size(), torch.distributed.get_rank()
        return 1, 0

    def _loader(self, split: str, train: bool) -> DataLoader:
        world_size, rank = self._world()
        if train and self.train_stream is not None:
            if self.curriculum is not None:
                raise ValueError(
                    "data.curriculum orders the training pairs by length: it needs training "
                    "data read whole, not streamed"
                )
            if self.gold_alignments or self.copy_ids:
                raise ValueError(
                    "gold alignments and copy ids (task.alignment_loss_weight, "
                    "model/copy=pointer_generator) need training data read whole, not streamed"
                )
            encoder = PairEncoder(
                self.source_tokenizer,
                self.target_tokenizer,
                self.source_vocab,
                self.target_vocab,
                self.max_length,
            )
            batches = StreamedBatches(
                self.train_stream,
                encoder,
                batch_size=self.batch_size,
                max_tokens=self.max_tokens,
                pool_batches=self.pool_batches,
                seed=self.seed,
                world_size=world_size,
                rank=rank,
                num_workers=self.num_workers,
            )
            return ResumableLoader(
                batches,
                seed=self.seed,
                num_workers=self.num_workers,
                trained=self._trained_on_last_taken,
            )
        pairs = self.pairs[split]
        pairs.annotate = self._annotations(split, train)
        sampler = LengthBucketSampler(
            pairs.lengths(),
            batch_size=self.batch_size if train else self.eval_batch_size,
            max_tokens=self.max_tokens if train else None,
            shuffle=train,
            seed=self.seed,
            pool_batches=self.pool_batches,
            world_size=world_size,
            rank=rank,
            curriculum=self.curriculum if train else None,
        )
        if train:
            return ResumableLoader(
                pairs,
                sampler,
                seed=self.seed,
                num_workers=self.num_workers,
                trained=self._trained_on_last_taken,
            )
        return evaluation_loader(pairs, sampler, self.seed, self.num_workers)

    def train_dataloader(self) -> ResumableLoader:
        """Starts in the epoch Lightning is about to run (it calls `set_epoch` only after it
        has created the first iterator, which may already be fetching)."""
        loader = self._loader("train", train=True)
        if self.trainer is not None:
            loader.set_epoch(self.trainer.fit_loop.epoch_progress.current.processed)
        self._train_loader = loader
        return loader

    def val_dataloader(self) -> DataLoader:
        return self._loader("valid", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Lightning calls this as training takes a batch, after all fetching ahead: the
        training loader counts it, which is where a checkpoint resumes."""
        if self._train_loader is not None and self.trainer is not None and self.trainer.training:
            self._train_loader.taken(batch)
        return batch

    def _trained_on_last_taken(self) -> bool:
        """Whether Lightning has finished the training step of the batch it took last."""
        if self.trainer is None:
            return True
        progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
        return progress.processed == progress.ready
