"""Tokenisers turn raw lines into the tokens the vocabulary indexes, and back for sacrebleu.

Every tokeniser has `tokenize(str) -> list[str]`, `tokenize_batch(list[str])` (what data
preparation calls; SentencePiece encodes the whole list in one call), `detokenize(list[str])
-> str` and a `fingerprint` that changes whenever its output could, which keys the cache of
tokenised data.
`word_ids(str) -> list[int]` gives, for each token of `tokenize`, the index of the word of the
raw sentence it comes from (words: `text.split()`), the unit gold alignments usually index.
Tokenisers learnt from the training data (SentencePiece) also have `fit` and plain-value
`state_dict`/`load_state_dict`, which checkpoints carry so that they translate on their own.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import random
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path

from alignmt.atomic import write_with
from alignmt.data.cache_lock import filling

log = logging.getLogger(__name__)


def _word_of_each_character(text: str) -> list[int]:
    """Index of the `text.split()` word each character is in; -1 for whitespace."""
    words, word, inside = [], -1, False
    for char in text:
        if char.isspace():
            inside = False
            words.append(-1)
        else:
            if not inside:
                word += 1
            inside = True
            words.append(word)
    return words


class WhitespaceTokenizer:
    """For text that is already tokenised by single spaces (the toy corpus, pre-tokenised files)."""

    fingerprint = "whitespace"
    splits_words = False  # its tokens are words: lengths and alignments count them

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        return [self.tokenize(text) for text in texts]

    def detokenize(self, tokens: Sequence[str]) -> str:
        return " ".join(tokens)

    def word_ids(self, text: str) -> list[int]:
        return list(range(len(text.split())))


class MosesTokenizer:
    """Moses tokenisation (sacremoses), as in Bahdanau et al.; detokenises for sacrebleu.

    Tokens are not XML-escaped (Moses' default turns & into &amp;), so detokenised output
    compares with the raw references.
    """

    splits_words = False

    def __init__(self, lang: str | None, aggressive_dash_splits: bool = False):
        from sacremoses import MosesDetokenizer
        from sacremoses import MosesTokenizer as Moses

        if not lang:
            raise ValueError(
                "the Moses tokeniser needs a language code: set data.corpus.source_lang and "
                "data.corpus.target_lang (e.g. de, en, fr)"
            )
        self.lang = lang
        self.aggressive_dash_splits = aggressive_dash_splits
        self._tokenizer = Moses(lang)
        self._detokenizer = MosesDetokenizer(lang)
        self.fingerprint = (
            f"moses:{lang}:dash={aggressive_dash_splits}:sacremoses={version('sacremoses')}"
        )

    def tokenize(self, text: str) -> list[str]:
        return self._tokenizer.tokenize(
            text, escape=False, aggressive_dash_splits=self.aggressive_dash_splits
        )

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """One sentence at a time (sacremoses has no batch call); data preparation runs it in
        one process per core."""
        return [self.tokenize(text) for text in texts]

    def detokenize(self, tokens: Sequence[str]) -> str:
        return self._detokenizer.detokenize(list(tokens), unescape=False)

    def word_ids(self, text: str) -> list[int]:
        """The word of `text` each token of `tokenize(text)` comes from.

        Moses only inserts spaces (its context rules decide where), deletes ASCII control
        characters and writes a split dash as `@-@`; so the tokens of the whole sentence are
        read off its characters in order. Tokenising word by word instead would lose the rules
        that look across a space (a full stop kept before a lower-case word, an apostrophe
        split off after a space) and give other tokens than `tokenize`.
        """
        word_of = _word_of_each_character(text)
        kept = [k for k, char in enumerate(text) if word_of[k] >= 0 and char >= " "]
        ids, position = [], 0

        def read(length: int) -> str:
            return "".join(text[k] for k in kept[position : position + length])

        for token in self.tokenize(text):
            surface = "-" if token == "@-@" and read(3) != token else token  # a split dash
            span = kept[position : position + len(surface)]
            if read(len(surface)) != surface or word_of[span[0]] != word_of[span[-1]]:
                raise ValueError(f"Moses token {token!r} is not a piece of one word of {text!r}")
            ids.append(word_of[span[0]])
            position += len(surface)
        return ids


MODEL_TYPES = ("bpe", "unigram")


def reservoir(items: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of at most `size` items (seeded), in their original order.

    SentencePiece samples its input itself when given more than `input_sentence_size`
    sentences, and not reproducibly even with its generator seeded; given no more, it
    trains the same model every time.
    """
    rng, kept = random.Random(seed), []
    for seen, item in enumerate(items):
        if seen < size:
            kept.append((seen, item))
        elif (slot := rng.randrange(seen + 1)) < size:
            kept[slot] = (seen, item)
    return [item for _, item in sorted(kept)]


class SentencePieceTokenizer:
    """Subword units (SentencePiece, BPE or unigram) learnt from the training split.

    `fit` trains once per cache file (the others wait for it and load it) and saves the model
    there; the model itself is a few hundred kB of bytes in `state_dict`, which the checkpoint
    stores. `model_file` names a trained model to use instead, read when the data module fits
    its tokenisers (a checkpoint restored for evaluation needs no file). One instance used
    for both languages is a joint model.
    """

    splits_words = True  # subword pieces: lengths and alignments count the raw words

    def __init__(
        self,
        model_type: str = "bpe",
        vocab_size: int = 16000,
        character_coverage: float = 1.0,
        input_sentence_size: int = 2_000_000,
        model_file: str | None = None,
    ):
        if model_type not in MODEL_TYPES:
            raise ValueError(f"SentencePiece model_type must be one of {MODEL_TYPES}")
        self.options = {
            "model_type": model_type,
            "vocab_size": vocab_size,
            "character_coverage": character_coverage,
            "input_sentence_size": input_sentence_size,
        }
        self.model_file = Path(model_file).expanduser() if model_file else None
        self._model: bytes | None = None
        self._processor = None

    @property
    def trained(self) -> bool:
        return self._model is not None

    @property
    def training_key(self) -> str:
        """What, besides the training text, determines the model (for its cache file name)."""
        return json.dumps({**self.options, "sentencepiece": version("sentencepiece")})

    @property
    def fingerprint(self) -> str:
        self._require_model()
        return "sentencepiece:" + hashlib.sha256(self._model).hexdigest()[:16]

    def fit(self, sentences: Iterable[str], model_file: str | Path, seed: int = 0) -> None:
        """Load `self.model_file` if one is set; else load `model_file` if it exists, or train on
        `sentences` (its random sampling seeded by `seed`) and save the model there. One
        process per `model_file` trains; the others wait and load what it saved."""
        if self.model_file is not None:
            if not self.model_file.is_file():
                raise FileNotFoundError(
                    f"data.tokenizer.model_file: no such file: {self.model_file}"
                )
            self.load_state_dict({"model": self.model_file.read_bytes()})
            return
        model_file = Path(model_file)
        with filling(model_file):
            if not model_file.is_file():
                model = self._train(sentences, seed)
                write_with(model_file, lambda f: f.write(model))  # never half a file
        self.load_state_dict({"model": model_file.read_bytes()})

    def _train(self, sentences: Iterable[str], seed: int) -> bytes:
        import sentencepiece as spm

        log.info("training SentencePiece %s (seed %d)", self.options, seed)
        spm.set_random_generator_seed(seed)
        chosen = reservoir(
            (s for s in sentences if s.strip()), self.options["input_sentence_size"], seed
        )
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(chosen),
            model_writer=model,
            bos_id=-1,
            eos_id=-1,
            hard_vocab_limit=False,  # a small corpus gets fewer pieces, not an error
            shuffle_input_sentence=True,
            minloglevel=2,
            num_threads=os.cpu_count() or 1,
            **self.options,
        )
        return model.getvalue()

    def state_dict(self) -> dict:
        self._require_model()
        return {"model": self._model}

    def load_state_dict(self, state: dict) -> None:
        import sentencepiece as spm

        self._model = bytes(state["model"])
        self._processor = spm.SentencePieceProcessor(model_proto=self._model)

    def __getstate__(self) -> dict:  # the processor does not pickle (DataLoader workers)
        return {"options": self.options, "model_file": self.model_file, "model": self._model}

    def __setstate__(self, state: dict) -> None:
        self.options, self._model, self._processor = state["options"], None, None
        self.model_file = state.get("model_file")
        if state["model"] is not None:
            self.load_state_dict({"model": state["model"]})

    def _require_model(self) -> None:
        if self._model is None:
            raise RuntimeError(
                "the SentencePiece model is not trained yet: set up the data module for "
                "training ('fit'), or restore it from a checkpoint"
            )

    def tokenize(self, text: str) -> list[str]:
        self._require_model()
        return self._processor.encode(text, out_type=str)

    def tokenize_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """The whole list in one call into SentencePiece (one thread: preparation runs one
        process per core)."""
        self._require_model()
        return self._processor.encode(list(texts), out_type=str, num_threads=1)

    def detokenize(self, tokens: Sequence[str]) -> str:
        self._require_model()
        return self._processor.decode(list(tokens))

    def word_ids(self, text: str) -> list[int]:
        """The word of `text` each piece of `tokenize(text)` comes from, by the pieces' offsets.

        A piece belongs to the word its last non-space character is in; a bare "▁" (no
        character of its own) to the word after it. Offsets, rather than counting pieces that
        start with "▁", keep this right where normalisation (NFKC) adds a space inside a word
        or removes a word.
        """
        self._require_model()
        encoded = self._processor.encode(text, return_type="offset_mapping")
        word_of = _word_of_each_character(text)
        next_word = [max(word_of, default=0)] * (len(text) + 1)
        for k in range(len(text) - 1, -1, -1):
            next_word[k] = word_of[k] if word_of[k] >= 0 else next_word[k + 1]
        ids = []
        for begin, end in encoded["offsets"]:
            inside = [word_of[k] for k in range(begin, end) if word_of[k] >= 0]
            ids.append(inside[-1] if inside else next_word[end])
        return ids
