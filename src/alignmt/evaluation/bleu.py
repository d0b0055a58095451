"""Corpus BLEU and chrF through sacrebleu, so scores are comparable with published numbers.

A model's [UNK] is one wrong word, but sacrebleu's 13a (and intl, zh) tokeniser splits the
string "[UNK]" into "[ UNK ]": three tokens, which lengthen the hypothesis (a softer brevity
penalty) and add n-grams that can match brackets in a reference. Hypotheses are therefore
scored with every [UNK] written as a placeholder word that every sacrebleu tokeniser keeps
as one token and that no reference contains; the signatures say so.

Where a corpus has several references per sentence, `extra_references` holds the second,
third, ... reference of every sentence (one stream each, as sacrebleu takes them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.bleu import BLEUScore

from alignmt.special_tokens import UNK

# U+A66E CYRILLIC LETTER MULTIOCULAR O: a letter, so no tokeniser splits it off or apart,
# and one that reference translations do not use.
UNK_PLACEHOLDER = "\ua66e"
UNK_NOTE = f"[UNK] scored as one token {UNK_PLACEHOLDER!r} (U+A66E), which matches no reference"
UNK_SIGNATURE = "|unk:one-token"

Streams = Sequence[Sequence[str]]  # reference sets beyond the first, one line per sentence each


def check_parallel(
    hypotheses: list[str], references: list[str], extra_references: Streams = ()
) -> list[Sequence[str]]:
    """Every reference stream, once each has one line per hypothesis: a silently truncated
    corpus gives a plausible but wrong score; refuse it instead."""
    streams = [references, *extra_references]
    for k, stream in enumerate(streams, start=1):
        if len(hypotheses) != len(stream):
            which = "references" if len(streams) == 1 else f"references (set {k})"
            raise ValueError(
                f"{len(hypotheses)} hypotheses but {len(stream)} {which}; "
                "one of the files is out of line"
            )
    if not hypotheses:
        raise ValueError("cannot score an empty corpus")
    return streams


def scoring_text(
    hypotheses: list[str], streams: Sequence[Sequence[str]], tokenize: str = "13a"
) -> list[str]:
    """The hypotheses as every metric here scores them: [UNK] as one token at the token
    boundaries of sacrebleu's `tokenize` tokeniser (`unk_as_one_token`)."""
    every_reference = [r for stream in streams for r in stream]
    return unk_as_one_token(hypotheses, every_reference, BLEU(tokenize=tokenize).tokenizer)


def unk_as_one_token(
    hypotheses: list[str], references: list[str], tokenizer: Callable[[str], str]
) -> list[str]:
    """The hypotheses with each [UNK] written as `UNK_PLACEHOLDER`. `tokenizer` is the
    metric's (`BLEU.tokenizer`), whose token boundaries are kept: a tokeniser that splits
    "[UNK]" off the characters around it (13a, intl, zh, char) gets the placeholder as a word
    of its own, one that does not (none) gets it in place.

    Fails if a reference contains the placeholder (it could match) or the tokeniser splits it.
    """
    if not any(UNK in h for h in hypotheses):
        return list(hypotheses)
    if any(UNK_PLACEHOLDER in r for r in references):
        raise ValueError(
            f"a reference contains {UNK_PLACEHOLDER!r} (U+A66E), the placeholder [UNK] is "
            "scored as; it would match there"
        )
    probe = f"a {UNK_PLACEHOLDER} b"
    if tokenizer(probe).split() != probe.split():
        raise ValueError(
            f"the BLEU tokeniser does not keep {UNK_PLACEHOLDER!r} (U+A66E) as one token, "
            f"so [UNK] cannot be scored as one: {probe!r} -> {tokenizer(probe)!r}"
        )
    apart = len(tokenizer(f"x{UNK}y").split()) > 1
    placeholder = f" {UNK_PLACEHOLDER} " if apart else UNK_PLACEHOLDER
    return [h.replace(UNK, placeholder) for h in hypotheses]


def corpus_bleu(
    hypotheses: list[str],
    references: list[str],
    tokenize: str = "13a",
    extra_references: Streams = (),
) -> BLEUScore:
    """sacrebleu's corpus BLEU (with its counts and lengths), [UNK] scored as one token."""
    streams = check_parallel(hypotheses, references, extra_references)
    metric = BLEU(tokenize=tokenize)
    return metric.corpus_score(scoring_text(hypotheses, streams, tokenize), streams)


def corpus_scores(
    hypotheses: list[str],
    references: list[str],
    tokenize: str = "13a",
    extra_references: Streams = (),
) -> dict:
    """BLEU and chrF of detokenized output against one reference per sentence (or several:
    `extra_references`).

    The signatures record every setting that changes the number (tokenizer, casing,
    smoothing, number of references, sacrebleu version, and `|unk:one-token`, explained by
    `unk_note`) and belong next to any reported score.
    """
    refs = check_parallel(hypotheses, references, extra_references)
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    hypotheses = scoring_text(hypotheses, refs, tokenize)
    return {
        "bleu": bleu.corpus_score(hypotheses, refs).score,
        "chrf": chrf.corpus_score(hypotheses, refs).score,
        "bleu_signature": str(bleu.get_signature()) + UNK_SIGNATURE,
        "chrf_signature": str(chrf.get_signature()) + UNK_SIGNATURE,
        "unk_note": UNK_NOTE,
    }
