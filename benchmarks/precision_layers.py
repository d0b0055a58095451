"""Which of a trained decoder's matrices change its outputs when rounded to int8 alone.

    python benchmarks/precision_layers.py CHECKPOINT [--references FILE] [--split test]
        [--search greedy|beam5] [--batch-size 64] [--max-length 100] [--threads 2]

Decodes the split at natural lengths in float32, then once with each matrix of the decoder (its
linear layers and a one-layer GRU) in int8 alone, the rest float32, then at each reduced
`decoding.precision`; prints, for each, how many outputs differ from float32's and the BLEU
(sacrebleu), also less float32's, against the references: the lines of FILE, else the split's
own targets as the model's vocabulary spells them ([UNK] for words it lacks). Batches are
workload.py's, so on the workload the figures are compare.py's.
"""

from __future__ import annotations

import argparse
import copy
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--references", type=Path, default=None)
    parser.add_argument("--split", choices=["test", "valid"], default="test")
    parser.add_argument("--search", choices=["greedy", "beam5"], default="greedy")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import sacrebleu
    import torch

    from alignmt.build import restore
    from alignmt.data.batching import LengthBucketSampler, collate
    from alignmt.decoding import BeamSearch, GreedySearch
    from alignmt.decoding.precision import PRECISIONS
    from alignmt.models.quantized import Int8Linear, QuantizedGRU, is_matrix
    from alignmt.models.step_linear import is_one_layer_gru

    torch.set_num_threads(args.threads)
    restored = restore(args.checkpoint)
    dm = restored.datamodule
    dm.setup("test")
    pairs = dm.pairs[args.split]
    vocab = dm.target_vocab
    if args.references is None:
        references = [" ".join(vocab.decode(pairs[i][2].tolist())) for i in range(len(pairs))]
    else:
        references = args.references.read_text().splitlines()
    if len(references) != len(pairs):
        raise SystemExit(f"{args.references}: {len(references)} lines for {len(pairs)} sentences")
    batches = [
        collate([pairs[i] for i in indices])
        for indices in LengthBucketSampler(pairs.lengths(), args.batch_size, shuffle=False)
    ]
    model = restored.model.eval()

    def decode(model, precision="float32") -> list[str]:
        if args.search == "greedy":
            search = GreedySearch(max_length=args.max_length, precision=precision)
        else:
            search = BeamSearch(beam_size=5, max_length=args.max_length, precision=precision)
        outputs = [""] * len(pairs)
        with torch.inference_mode():
            for batch in batches:
                nbest = search(model, batch.src, batch.src_lengths)
                for i, hyps in zip(batch.indices.tolist(), nbest, strict=True):
                    outputs[i] = " ".join(vocab.decode(hyps[0].tokens))
        return outputs

    def report(name: str, outputs: list[str]) -> None:
        changed = sum(a != b for a, b in zip(outputs, exact, strict=True))
        bleu = sacrebleu.corpus_bleu(outputs, [references]).score
        print(f"| {name} | {changed} | {bleu:.2f} | {bleu - exact_bleu:+.3f} |", flush=True)

    def with_int8(path: str):
        """A copy of the model with the decoder's layer at `path` alone in int8."""
        low = copy.deepcopy(model)
        parent, _, name = f"decoder.{path}".rpartition(".")
        layer = getattr(low.get_submodule(parent), name)
        int8 = QuantizedGRU(layer) if is_one_layer_gru(layer) else Int8Linear.of(layer)
        setattr(low.get_submodule(parent), name, int8)
        return low

    layers = [
        path
        for path, layer in model.decoder.named_modules()
        if is_one_layer_gru(layer) or is_matrix(layer)
    ]
    print(f"{args.checkpoint}: {args.split}, {args.search} at batch {args.batch_size}, ", end="")
    print(f"{len(pairs)} sentences\n")
    print("| decoding | outputs changed | BLEU | BLEU - float32's |\n|---|---|---|---|")
    exact = decode(model)
    exact_bleu = sacrebleu.corpus_bleu(exact, [references]).score
    report("float32", exact)
    for path in layers:
        report(f"`{path}` alone in int8", decode(with_int8(path)))
    for precision in PRECISIONS[1:]:  # after float32
        report(f"decoding.precision={precision}", decode(model, precision))


if __name__ == "__main__":
    main()
