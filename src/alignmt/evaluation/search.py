"""What a search's outputs say about the search: the beam-search curse (Koehn and Knowles 2017).

Per sentence, the search's best output is set against the reference under the score the
search ranks by (log P with GNMT's length and coverage penalties, `BeamSearch.ranking_score`;
the reference's log P is the teacher-forced sum of its token log-probabilities). Over a test
set that gives:

  * the hypothesis/reference length ratio (sacrebleu's sys_len / ref_len);
  * the share of empty outputs, and of outputs that hit the length cap (truncated: the search
    allowed only [EOS] there);
  * the search-error rate: the share of sentences whose reference scores higher than the
    output, among those whose reference the search could have returned (within its length
    limits, and without [UNK] where it forbids [UNK]);
  * between two beam sizes, the share of sentences where the larger beam's output scores
    higher yet has a lower sentence BLEU than the smaller's: more search, worse translation.

The reference and the output are scored by different float32 computations (one teacher-forced
pass, the search's step-by-step sums), so an output equal to the reference is never an error and
score differences within `TOLERANCE` nats count as ties.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import NamedTuple

import torch

from alignmt.atomic import replacing
from alignmt.data.batching import Batch
from alignmt.decoding.hypothesis import banned_tokens, max_output_lengths
from alignmt.evaluation.bleu import corpus_bleu
from alignmt.evaluation.rewards import SentenceBLEU
from alignmt.special_tokens import PAD_ID

TOLERANCE = 1e-4  # nats


@dataclass(frozen=True)
class SearchOutcome:
    """One test sentence: the search's best output against the reference."""

    index: int  # position in the split
    output_words: int  # [EOS] not counted
    cap: int  # most words the search allowed
    output_score: float  # the search's ranking score of its output
    reference_words: int
    reference_score: float  # the same score of the reference
    reachable: bool  # whether the search could have returned the reference
    equals_reference: bool
    sentence_bleu: float  # of the output, 0..100

    @property
    def search_error(self) -> bool:
        return (
            self.reachable
            and not self.equals_reference
            and self.reference_score > self.output_score + TOLERANCE
        )


def length_ratio(hypotheses: list[str], references: list[str]) -> float:
    """sacrebleu's hypothesis/reference length ratio (sys_len / ref_len, its tokens)."""
    bleu = corpus_bleu(hypotheses, references)
    return bleu.sys_len / bleu.ref_len


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else float("nan")


def search_metrics(outcomes: Sequence[SearchOutcome]) -> dict[str, float]:
    """Shares over the test sentences (search errors: over the reachable ones)."""
    if not outcomes:
        raise ValueError("no sentences to measure the search on")
    reachable = [o for o in outcomes if o.reachable]
    return {
        "empty_share": _share([o.output_words == 0 for o in outcomes]),
        "truncated_share": _share([o.output_words >= o.cap for o in outcomes]),
        "search_error_rate": _share([o.search_error for o in reachable]),
        "reference_unreachable_share": 1 - len(reachable) / len(outcomes),
        "output_is_reference_share": _share([o.equals_reference for o in outcomes]),
    }


def larger_beam_regressions(
    smaller: Sequence[SearchOutcome], larger: Sequence[SearchOutcome]
) -> dict[str, float]:
    """Sentence by sentence (matched by index), the share where the larger beam's output
    scores higher than the smaller's, and the share where it scores higher but has a lower
    sentence BLEU. Both runs must rank by the same score (the same penalties)."""
    by_index = {o.index: o for o in smaller}
    if sorted(by_index) != sorted(o.index for o in larger):
        raise ValueError("the two runs did not decode the same sentences")
    pairs = [(by_index[o.index], o) for o in larger]
    higher = [b.output_score > a.output_score + TOLERANCE for a, b in pairs]
    worse = [
        h and b.sentence_bleu < a.sentence_bleu for h, (a, b) in zip(higher, pairs, strict=True)
    ]
    return {"higher_score_share": _share(higher), "higher_score_worse_bleu_share": _share(worse)}


class Reference(NamedTuple):
    ids: tuple[int, ...]  # words, without [EOS]
    score: float  # under the search's ranking score
    cap: int  # most words the search allows for this sentence
    reachable: bool  # within the search's lengths and without a word it never writes


@torch.no_grad()
def reference_scores(model, search, batches: Iterable[Batch]) -> dict[int, Reference]:
    """Each reference scored by `search.ranking_score`, by its index in the split: the
    teacher-forced log P, with the length penalty of its length ([EOS] counted) and the
    coverage penalty of its teacher-forced attention; and the search's cap on that sentence."""
    training = model.training
    model.eval()
    out: dict[int, Reference] = {}
    try:
        for batch in batches:
            forced = model(batch.src, batch.src_lengths, batch.tgt_in)
            real = batch.tgt_out != PAD_ID
            log_probs = torch.log_softmax(forced.logits.float(), dim=-1)
            tokens = log_probs.gather(2, batch.tgt_out.unsqueeze(2)).squeeze(2)
            log_p = tokens.masked_fill(~real, 0.0).sum(1)
            coverage = None
            if forced.attention is not None:
                coverage = (forced.attention.float() * real.unsqueeze(2)).sum(1)
            lengths = real.sum(1)
            src_lengths = batch.src_lengths.to(log_p.device)
            scores = search.ranking_score(log_p, lengths, coverage, src_lengths).tolist()
            caps = max_output_lengths(
                batch.src_lengths,
                search.max_length_ratio,
                search.max_length_offset,
                search.max_length,
            ).tolist()
            never = set(banned_tokens(search.forbid_unk))
            rows = zip(
                batch.indices.tolist(), batch.tgt_out.tolist(), lengths.tolist(), strict=True
            )
            for b, (i, ids, n) in enumerate(rows):
                words = tuple(ids[: n - 1])
                reachable = search.min_length <= len(words) <= caps[b] and not never & set(words)
                out[i] = Reference(words, scores[b], caps[b], reachable)
    finally:
        model.train(training)
    return out


def search_outcomes(
    evaluation, references: dict[int, Reference], reference_texts: Sequence[str]
) -> list[SearchOutcome]:
    """Every sentence of a decoded split (`Evaluation`) against its scored reference; the
    sentence BLEU (sacrebleu, `SentenceBLEU`) is of the output text against the raw reference."""
    sentences = evaluation.sentences
    texts = [s.translation.text for s in sentences]
    bleu = SentenceBLEU()(texts, [reference_texts[s.index] for s in sentences])
    outcomes = []
    for s, sentence_bleu in zip(sentences, bleu, strict=True):
        t, reference = s.translation, references[s.index]
        outcomes.append(
            SearchOutcome(
                index=s.index,
                output_words=len(t.ids),
                cap=reference.cap,
                output_score=float(t.score),
                reference_words=len(reference.ids),
                reference_score=reference.score,
                reachable=reference.reachable,
                equals_reference=tuple(t.ids) == reference.ids,
                sentence_bleu=100 * sentence_bleu,
            )
        )
    return outcomes


SEARCH_CSV = "search.csv"  # per-sentence outcomes in an evaluation's run directory


def write_outcomes(path: str | Path, outcomes: Sequence[SearchOutcome]) -> None:
    """One row per sentence (`search.csv` in an evaluation's run directory)."""
    with replacing(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f.name for f in fields(SearchOutcome)])
        writer.writerows(astuple(o) for o in outcomes)


def read_outcomes(path: str | Path) -> list[SearchOutcome]:
    types = {f.name: f.type for f in fields(SearchOutcome)}
    parse = {"int": int, "float": float, "bool": lambda s: s == "True"}
    with Path(path).open(newline="") as f:
        return [
            SearchOutcome(**{k: parse[types[k]](v) for k, v in row.items()})
            for row in csv.DictReader(f)
        ]
