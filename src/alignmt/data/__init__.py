"""Corpora, tokenisers, vocabularies and batching."""

from alignmt.data.batching import Batch, LengthBucketSampler
from alignmt.data.corpus import DataUnavailableError, ParallelText, ToyCorpus, read_parallel_files
from alignmt.data.datamodule import TranslationDataModule
from alignmt.data.hub import HubCorpus
from alignmt.data.multi30k import Multi30kCorpus
from alignmt.data.text_files import TextFilesCorpus
from alignmt.data.tokenizers import MosesTokenizer, SentencePieceTokenizer, WhitespaceTokenizer
from alignmt.data.vocab import Vocabulary

__all__ = [
    "Batch",
    "DataUnavailableError",
    "HubCorpus",
    "LengthBucketSampler",
    "MosesTokenizer",
    "Multi30kCorpus",
    "ParallelText",
    "SentencePieceTokenizer",
    "TextFilesCorpus",
    "ToyCorpus",
    "TranslationDataModule",
    "Vocabulary",
    "WhitespaceTokenizer",
    "read_parallel_files",
]
