"""Per-sentence evaluation results own their storage: gathered across DDP processes, each
pickles to the size of its own sentence, never to that of the batch it was decoded in."""

import pickle

import numpy as np
import torch

from alignmt.build import build


def arrays(result) -> list[np.ndarray]:
    found = [result.forced_attention, result.translation.attention]
    if result.no_unk is not None:
        found.append(result.no_unk.attention)
    return [a for a in found if a is not None]


def test_a_sentence_result_pickles_to_the_size_of_its_sentence(compose_train):
    built = build(compose_train("data.eval_batch_size=32"))
    batch = next(iter(built.datamodule.test_dataloader()))
    built.model.eval()
    evaluator = built.task.evaluator
    evaluator.add(batch, "test", detailed=True)
    sentences = evaluator.gather("test").sentences
    assert len(sentences) == len(batch) == 18  # the tiny test split, in one batch
    with torch.no_grad():
        forced = built.model(batch.src, batch.src_lengths, batch.tgt_in)
    batch_bytes = forced.attention.numel() * 4 + forced.logits.numel() * 4
    for result in sentences:
        own = arrays(result)
        assert len(own) >= 2 and all(a.base is None for a in own)  # copies, not views
        words = len(result.translation.ids) + len(result.translation.source_tokens)
        size = len(pickle.dumps(result))
        # its arrays, its words and ids, and a fixed overhead of field names and types
        assert size <= sum(a.nbytes for a in own) + 64 * words + 3000
        assert 20 * size < batch_bytes
