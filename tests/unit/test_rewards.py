"""Sentence rewards score the detokenised text, as evaluation does, and never reward [UNK]."""

from types import SimpleNamespace

import pytest
import torch
from sacrebleu.metrics import BLEU, CHRF

from alignmt.data import Vocabulary
from alignmt.evaluation.rewards import SentenceBLEU, SentenceChrF, ids_to_text, sequence_rewards
from alignmt.objectives import output_rewards
from alignmt.special_tokens import EOS_ID, PAD_ID, UNK_ID


class Pieces:
    """SentencePiece-like detokenisation: pieces glued, "▁" a space."""

    def detokenize(self, tokens):
        return "".join(tokens).replace("▁", " ").strip()


VOCAB = Vocabulary(["[PAD]", "[UNK]", "[BOS]", "[EOS]", "▁the", "▁cat", "▁c", "at", "▁sat"])
THE, CAT, C, AT, SAT = (VOCAB.stoi[p] for p in ("▁the", "▁cat", "▁c", "at", "▁sat"))


def test_the_text_is_what_the_translator_writes():
    assert ids_to_text([THE, C, AT, EOS_ID, SAT, PAD_ID], VOCAB, Pieces()) == "the cat"


@pytest.mark.parametrize("reward", [SentenceBLEU(), SentenceChrF()])
def test_pieces_that_spell_the_reference_earn_the_full_reward(reward):
    # Other pieces than the reference's, the same text: the reward follows the text.
    hypothesis, reference = [THE, C, AT, SAT, EOS_ID], [THE, CAT, SAT, EOS_ID, PAD_ID]
    [value] = sequence_rewards(reward, [hypothesis], [reference], VOCAB, Pieces())
    assert value == pytest.approx(1.0)
    # On the pieces themselves it would not be: 2 of 4 pieces match, no bigram does.
    pieces = " ".join(VOCAB.decode(hypothesis)), " ".join(VOCAB.decode(reference))
    assert BLEU(effective_order=True).sentence_score(pieces[0], [pieces[1]]).score < 50


def test_the_objectives_score_outputs_through_the_tasks_translator():
    translator = SimpleNamespace(target_vocab=VOCAB, target_tokenizer=Pieces())
    task = SimpleNamespace(evaluator=SimpleNamespace(translator=translator))
    outputs = torch.tensor([[THE, C, AT, SAT, EOS_ID], [SAT, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    references = torch.tensor([[THE, CAT, SAT, EOS_ID], [THE, CAT, SAT, EOS_ID]])
    rewards = output_rewards(task, SentenceBLEU(), outputs, references)
    expected = BLEU(effective_order=True).sentence_score("sat", ["the cat sat"]).score / 100
    assert rewards.tolist() == pytest.approx([1.0, expected])


@pytest.mark.parametrize(
    ("reward", "metric"), [(SentenceBLEU(), BLEU(effective_order=True)), (SentenceChrF(), CHRF())]
)
def test_unk_is_one_word_that_matches_nothing(reward, metric):
    pieces = Pieces()
    hypothesis, reference = [THE, UNK_ID, SAT, EOS_ID], [THE, UNK_ID, SAT, EOS_ID]
    [value] = sequence_rewards(reward, [hypothesis], [reference], VOCAB, pieces)
    # As if each [UNK] were a word of its own, different on the two sides.
    assert value == pytest.approx(metric.sentence_score("the x sat", ["the y sat"]).score / 100)
    assert value < 1.0


def test_sentence_bleu_smoothing_is_sacrebleus_and_configurable():
    exp, floor = SentenceBLEU(), SentenceBLEU(smooth_method="floor", smooth_value=0.1)
    text = ("the cat", "the cat sat on the mat")
    expected = BLEU(effective_order=True, smooth_method="floor", smooth_value=0.1)
    assert floor(*[[t] for t in text]) == [expected.sentence_score(text[0], [text[1]]).score / 100]
    assert exp(["a b c d"], ["a x c y"]) != floor(["a b c d"], ["a x c y"])  # no bigram
    assert "smooth:exp" in exp.signature and "eff:yes" in exp.signature
    assert "smooth:floor" in floor.signature
