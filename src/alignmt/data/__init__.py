from alignmt.data.batching import Batch, LengthBucketSampler
from alignmt.data.corpus import ParallelText, ToyCorpus, read_parallel_files
from alignmt.data.datamodule import TranslationDataModule
from alignmt.data.vocab import Vocabulary

__all__ = [
    "Batch",
    "LengthBucketSampler",
    "ParallelText",
    "ToyCorpus",
    "TranslationDataModule",
    "Vocabulary",
    "read_parallel_files",
]
