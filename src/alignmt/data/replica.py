"""A local folder laid out as the hub's `wmt/wmt14` is: tests and benchmarks read it offline.

The hub stores each pair as Parquet shards `<pair>/<split>-0000k-of-0000n.parquet` with one
column `translation` declared as a `datasets.Translation` feature (in the Parquet schema's
metadata and in the dataset card's `dataset_info`), and a README.md whose YAML `configs:` maps
each pair to its files. `write_hub_replica` writes exactly that, so the code that reads the
hub runs unchanged on the replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import datasets
import yaml

HUB_SPLIT_NAMES = ("train", "validation", "test")


def _languages(pair: str) -> list[str]:
    return pair.split("-")


def write_hub_shard(
    folder: Path, pair: str, split: str, index: int, count: int, columns: Mapping
) -> int:
    """One Parquet shard of a split from `{lang: sentences}`; returns its number of rows."""
    languages = _languages(pair)
    rows = [
        dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)
    ]
    features = datasets.Features({"translation": datasets.Translation(languages=languages)})
    target = Path(folder) / pair / f"{split}-{index:05d}-of-{count:05d}.parquet"
    target.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict({"translation": rows}, features=features).to_parquet(str(target))
    return len(rows)


def write_hub_card(folder: Path, rows: Mapping[str, Mapping[str, int]]) -> None:
    """The dataset card: `dataset_info` (features, split sizes) and `configs`, per pair."""
    info, configs = [], []
    for pair, splits in rows.items():
        info.append(
            {
                "config_name": pair,
                "features": [
                    {
                        "name": "translation",
                        "dtype": {"translation": {"languages": _languages(pair)}},
                    }
                ],
                "splits": [
                    {"name": split, "num_bytes": 0, "num_examples": n}
                    for split, n in splits.items()
                ],
            }
        )
        configs.append(
            {
                "config_name": pair,
                "data_files": [{"split": s, "path": f"{pair}/{s}-*"} for s in splits],
            }
        )
    card = yaml.safe_dump({"dataset_info": info, "configs": configs}, sort_keys=False)
    (Path(folder) / "README.md").write_text(f"---\n{card}---\n# A replica of wmt/wmt14's layout\n")


def write_hub_replica(
    folder: str | Path,
    pairs: Mapping[str, Mapping[str, Mapping[str, Sequence[str]]]],
    train_shards: int = 3,
) -> Path:
    """`pairs[pair][split][lang]` are the sentences; training is cut into `train_shards` shards."""
    folder = Path(folder)
    rows: dict[str, dict[str, int]] = {}
    for pair, splits in pairs.items():
        rows[pair] = {}
        for split, columns in splits.items():
            count = train_shards if split == "train" else 1
            n = len(next(iter(columns.values())))
            bounds = [n * k // count for k in range(count + 1)]
            rows[pair][split] = sum(
                write_hub_shard(
                    folder,
                    pair,
                    split,
                    k,
                    count,
                    {lang: lines[bounds[k] : bounds[k + 1]] for lang, lines in columns.items()},
                )
                for k in range(count)
            )
    write_hub_card(folder, rows)
    return folder
