"""Corpora, tokenisers, vocabularies and batching.

Names are imported on first use, so that `alignmt.data.vocab` (which the models need) does
not pull in Lightning, datasets and Hydra: the models run with torch alone.
"""

from importlib import import_module

_EXPORTS = {
    "Batch": "batching",
    "LengthBucketSampler": "batching",
    "DataUnavailableError": "corpus",
    "ParallelText": "corpus",
    "ToyCorpus": "corpus",
    "read_parallel_files": "corpus",
    "TranslationDataModule": "datamodule",
    "HubCorpus": "hub",
    "Multi30kCorpus": "multi30k",
    "TextFilesCorpus": "text_files",
    "MosesTokenizer": "tokenizers",
    "SentencePieceTokenizer": "tokenizers",
    "WhitespaceTokenizer": "tokenizers",
    "Vocabulary": "vocab",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
