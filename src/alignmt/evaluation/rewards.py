"""Sentence-level rewards for sequence-level training (MIXER, minimum risk training).

A reward scores what evaluation scores: detokenised text. Output ids become text the way the
translator writes its output (its target vocabulary, then its detokeniser; ids before [UNK]
replacement), so two token sequences that detokenise to the same sentence earn the same
reward, whatever their pieces. References are given as ids too and written the same way.

An [UNK] is one word that matches nothing, as in corpus BLEU (`alignmt.evaluation.bleu`): the
hypothesis' [UNK] is scored as sacrebleu-proof placeholder, and a reference's [UNK] (an
unknown reference word) as another one, so that generating [UNK] never earns a match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sacrebleu.metrics import BLEU, CHRF

from alignmt.evaluation.bleu import check_parallel, unk_as_one_token
from alignmt.special_tokens import UNK

# U+A66D CYRILLIC SMALL LETTER DOUBLE MONOCULAR O: like bleu.UNK_PLACEHOLDER a letter that
# no tokeniser splits and references do not use, but another one, so the two never match.
REFERENCE_UNK = "\ua66d"


def ids_to_text(ids: Sequence[int], vocab, tokenizer) -> str:
    """The text the translator would output for these ids: the vocabulary's tokens up to the
    first [EOS] ([PAD] and [BOS] dropped), detokenised."""
    return tokenizer.detokenize(vocab.decode(ids))


class SentenceReward:
    """reward(hypotheses, references) -> one score in [0, 1] per sentence pair."""

    def __init__(self, metric, tokenizer: Callable[[str], str]):
        self.metric = metric
        self.tokenizer = tokenizer  # the metric's, to keep [UNK] one token

    def score(self, hypothesis: str, reference: str) -> float:
        return self.metric.sentence_score(hypothesis, [reference]).score / 100.0

    def __call__(self, hypotheses: Sequence[str], references: Sequence[str]) -> list[float]:
        hypotheses, references = list(hypotheses), list(references)
        check_parallel(hypotheses, references)
        hypotheses = unk_as_one_token(hypotheses, references, self.tokenizer)
        apart = len(self.tokenizer(f"x{UNK}y").split()) > 1
        unknown = f" {REFERENCE_UNK} " if apart else REFERENCE_UNK
        references = [r.replace(UNK, unknown) for r in references]
        return [self.score(h, r) for h, r in zip(hypotheses, references, strict=True)]

    @property
    def signature(self) -> str:
        return str(self.metric.get_signature())


class SentenceBLEU(SentenceReward):
    """sacrebleu's sentence BLEU / 100 with effective n-gram order (n-gram orders longer than
    the hypothesis are left out) and a smoothing method, `exp` by default: sacrebleu's own
    for sentence BLEU (Chen and Cherry 2014, method 3, as NIST's mteval); `floor`, `add-k` or
    `none` also work, with `smooth_value`."""

    def __init__(
        self, smooth_method: str = "exp", smooth_value: float | None = None, tokenize: str = "13a"
    ):
        metric = BLEU(
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=True,
        )
        super().__init__(metric, metric.tokenizer)


class SentenceChrF(SentenceReward):
    """sacrebleu's sentence chrF / 100 (character 6-grams, beta 2; `word_order=2` for chrF++)."""

    def __init__(self, word_order: int = 0):
        super().__init__(CHRF(word_order=word_order), lambda text: text)


def sequence_rewards(
    reward: Callable[[list[str], list[str]], list[float]],
    hypotheses: Sequence[Sequence[int]],
    references: Sequence[Sequence[int]],
    vocab,
    tokenizer,
) -> list[float]:
    """The reward of each hypothesis against its reference, both given as target ids and
    scored as the text `ids_to_text` writes."""
    return reward(
        [ids_to_text(ids, vocab, tokenizer) for ids in hypotheses],
        [ids_to_text(ids, vocab, tokenizer) for ids in references],
    )
