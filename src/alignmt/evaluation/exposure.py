"""The exposure-bias probe: per-token accuracy on reference prefixes against the model's own.

Exposure bias is the gap between (1) the accuracy of the decoder fed the reference prefix
(teacher forcing, what training measures) and (2) its accuracy fed its own prefix (what
decoding does), where a token is right if it is a right continuation of the prefix the model
actually produced. (2) needs an oracle of the right next tokens after any prefix; real corpora
have none, only a reference, so there the probe reports what the reference does identify:
(3) accuracy on the sentences whose own prefix is still intact (equal to the reference so
far) and (4) the share of sentences still intact.

Positions are 1-based: position t holds the t-th target token (the reference's last is
[EOS]), and the prefix at t is the t - 1 tokens before it.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from alignmt.atomic import replacing

# oracle(i, prefix): the ids that rightly follow `prefix` (a sequence of ids) in sentence i.
Oracle = Callable[[int, Sequence[int]], Collection[int]]

NOT_IDENTIFIED = (
    "accuracy with the model's own prefix (and so exposure bias) is not identifiable "
    "without an oracle of the right next tokens after any prefix; reported: accuracy with "
    "the reference prefix, accuracy on intact prefixes and the share of intact prefixes"
)

CSV_COLUMNS = (
    "position",
    "sentences",
    "teacher_forced",
    "own_sentences",
    "own_prefix",
    "intact_sentences",
    "intact_accuracy",
    "intact_share",
)


def _rate(hits: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """hits / counts, NaN where nothing was counted."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)


@dataclass(frozen=True)
class ExposureCurves:
    """Counts per position t (array index t - 1); the four columns are their ratios.

    `own_hits` is None without an oracle: column (2) is then not identified.
    """

    sentences: np.ndarray  # references reaching t
    teacher_forced_hits: np.ndarray  # of those, argmax given the reference prefix == reference
    own_sentences: np.ndarray  # own outputs reaching t
    own_hits: np.ndarray | None  # of those, own token right given the own prefix (oracle)
    intact_sentences: np.ndarray  # references reaching t whose own prefix equals them up to t-1
    intact_hits: np.ndarray  # of those, own token right (by the oracle, else == reference)

    @property
    def identified(self) -> bool:
        return self.own_hits is not None

    @property
    def note(self) -> str | None:
        """Why column (2) is missing, or None when it is there."""
        return None if self.identified else NOT_IDENTIFIED

    @property
    def teacher_forced(self) -> np.ndarray:
        """(1) Accuracy given the reference prefix."""
        return _rate(self.teacher_forced_hits, self.sentences)

    @property
    def own_prefix(self) -> np.ndarray:
        """(2) Accuracy given the model's own prefix; NaN without an oracle."""
        if self.own_hits is None:
            return np.full(len(self.sentences), np.nan)
        return _rate(self.own_hits, self.own_sentences)

    @property
    def intact_accuracy(self) -> np.ndarray:
        """(3) Accuracy on the sentences whose own prefix is still intact."""
        return _rate(self.intact_hits, self.intact_sentences)

    @property
    def intact_share(self) -> np.ndarray:
        """(4) Share of the sentences whose own prefix is still intact."""
        return _rate(self.intact_sentences, self.sentences)

    def summary(self) -> dict[str, float]:
        """Token-weighted averages over all positions, for metrics.json.

        `own_prefix_accuracy` and `exposure_bias` (teacher-forced minus own-prefix accuracy)
        are there only with an oracle; `intact_share` is the share of reference tokens whose
        own prefix was intact.
        """
        tokens = self.sentences.sum()
        out = {
            "teacher_forced_accuracy": float(self.teacher_forced_hits.sum() / tokens),
            "intact_accuracy": float(self.intact_hits.sum() / self.intact_sentences.sum()),
            "intact_share": float(self.intact_sentences.sum() / tokens),
        }
        if self.own_hits is not None:
            own = float(self.own_hits.sum() / self.own_sentences.sum())
            out["own_prefix_accuracy"] = own
            out["exposure_bias"] = out["teacher_forced_accuracy"] - own
        return out

    def write_csv(self, path: str | Path) -> None:
        """One row per position; a blank cell where a column is undefined (NaN for pandas)."""
        columns = {
            "sentences": self.sentences,
            "teacher_forced": self.teacher_forced,
            "own_sentences": self.own_sentences,
            "own_prefix": self.own_prefix,
            "intact_sentences": self.intact_sentences,
            "intact_accuracy": self.intact_accuracy,
            "intact_share": self.intact_share,
        }
        with replacing(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            for t in range(len(self.sentences)):
                row = [t + 1]
                for name in CSV_COLUMNS[1:]:
                    value = columns[name][t]
                    if name.endswith("sentences"):
                        row.append(int(value))
                    else:
                        row.append("" if np.isnan(value) else float(value))
                writer.writerow(row)


def exposure_curves(
    references: Sequence[Sequence[int]],
    teacher_forced: Sequence[Sequence[int]],
    own_outputs: Sequence[Sequence[int]],
    oracle: Oracle | None = None,
) -> ExposureCurves:
    """The probe over a corpus; each argument holds one id sequence per sentence.

    `references` end in [EOS]; `teacher_forced` is the argmax at every reference position
    given the reference prefix; `own_outputs` is what the model decoded, ending in [EOS] if it
    ended. `oracle(i, prefix)` gives the ids that rightly follow `prefix` in sentence i; without
    it a token counts as right only on an intact prefix and only if it equals the reference.
    """
    if not len(references) == len(teacher_forced) == len(own_outputs) or len(references) == 0:
        raise ValueError("the probe needs the same, non-zero number of sentences in each list")
    T = max(max(len(r) for r in references), max(len(o) for o in own_outputs))
    sentences, tf_hits, own_sentences, own_hits, intact, intact_hits = (
        np.zeros(T, dtype=np.int64) for _ in range(6)
    )
    for i, (ref, tf, own) in enumerate(zip(references, teacher_forced, own_outputs, strict=True)):
        ref, own = np.asarray(ref), list(own)
        n = len(ref)
        tf = np.asarray(tf[:n])
        if len(tf) != n:
            raise ValueError("teacher-forced predictions must cover every reference position")
        sentences[:n] += 1
        tf_hits[:n] += tf == ref
        m = min(n, len(own))
        agree = np.asarray(own[:m]) == ref[:m]
        first_miss = int(np.argmin(agree)) if not agree.all() else m
        reach = min(first_miss + 1, n)  # positions 1..reach have an intact prefix
        intact[:reach] += 1
        own_sentences[: len(own)] += 1
        if oracle is None:
            right = agree
        else:
            right = np.array([tok in oracle(i, own[:t]) for t, tok in enumerate(own)], dtype=bool)
            own_hits[: len(own)] += right
        judged = min(reach, len(right))  # a missing own token on an intact prefix is wrong
        intact_hits[:judged] += right[:judged]
    return ExposureCurves(
        sentences, tf_hits, own_sentences, None if oracle is None else own_hits, intact, intact_hits
    )
