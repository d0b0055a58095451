"""[UNK] replacement from attention, its dictionary, and the "No UNK" test subset."""

import pytest
import torch

from alignmt.data.tokenizers import WhitespaceTokenizer
from alignmt.data.vocab import Vocabulary
from alignmt.decoding import GreedySearch
from alignmt.decoding.unk import UnkReplacer, read_dictionary
from alignmt.evaluation.unk import no_unk_mask
from alignmt.models.seq2seq import Memory
from alignmt.special_tokens import EOS_ID, PAD_ID, SPECIALS, UNK, UNK_ID
from alignmt.translator import Translator


def test_each_unk_becomes_the_most_attended_source_word():
    tokens = ["x", UNK, "y", UNK]
    attention = torch.tensor(
        [
            [0.7, 0.1, 0.1, 0.1],
            [0.1, 0.2, 0.6, 0.1],  # -> "Gamma"
            [0.1, 0.7, 0.1, 0.1],
            [0.3, 0.1, 0.0, 0.6],  # the [EOS] column is never chosen: -> "Alpha"
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
    replaced = UnkReplacer()(
        tokens, [t == UNK for t in tokens], ["Alpha", "Beta", "Gamma"], attention
    )
    assert replaced == ["x", "Gamma", "y", "Alpha"]


def test_the_dictionary_translates_the_copied_word(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("Gamma gamma-t\n\nAlpha alpha-t\nAlpha second-choice\n")
    replacer = UnkReplacer.from_file(path)
    attention = torch.tensor([[0.1, 0.1, 0.8], [0.9, 0.05, 0.05], [0.2, 0.7, 0.1]])
    out = replacer([UNK, UNK, UNK], [True] * 3, ["Alpha", "Beta", "Gamma"], attention)
    assert out == ["gamma-t", "alpha-t", "Beta"]  # first entry wins; no entry: copied


def test_a_malformed_dictionary_line_names_its_number(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("a b\nc d e\n")
    with pytest.raises(ValueError, match=r"dict.txt:2"):
        read_dictionary(path)


class UnkThenEos(torch.nn.Module):
    """Outputs [UNK] then [EOS], attending to source position `attend` at every step."""

    has_attention = True
    beams_share_memory = False
    copies_source = False

    def __init__(self, vocab_size: int, attend: int):
        super().__init__()
        self.vocab_size, self.attend = vocab_size, attend
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the translator a device

    def start(self, src, src_lengths):
        mask = torch.arange(src.size(1)) < src_lengths.unsqueeze(1)
        memory = Memory(src.unsqueeze(2).float(), None, mask)
        return memory, {"steps": torch.zeros(src.size(0))}

    def step(self, prev, memory, state):
        rows = prev.size(0)
        first = (state["steps"] == 0).unsqueeze(1)
        logits = torch.full((rows, self.vocab_size), -10.0)
        logits[:, UNK_ID] = torch.where(first, 10.0, -10.0).squeeze(1)
        logits[:, EOS_ID] = torch.where(first, -10.0, 10.0).squeeze(1)
        alpha = torch.zeros(rows, memory.mask.size(1))
        alpha[:, self.attend] = 1.0
        return logits, {"steps": state["steps"] + 1}, alpha


def translator(unk_replacer):
    return Translator(
        UnkThenEos(vocab_size=5, attend=1),
        GreedySearch(),
        Vocabulary([*SPECIALS, "the", "sleeps"]),
        Vocabulary([*SPECIALS, "x"]),
        WhitespaceTokenizer(),
        WhitespaceTokenizer(),
        unk_replacer=unk_replacer,
    )


def test_the_translator_copies_unknown_source_words_not_their_unk_id():
    plain = translator(None).translate(["the Zorglub sleeps"])[0][0]
    copied = translator(UnkReplacer()).translate(["the Zorglub sleeps"])[0][0]
    translated = translator(UnkReplacer({"Zorglub": "Zorglüb"})).translate(["the Zorglub sleeps"])
    assert plain.source_tokens == ["the", UNK, "sleeps"] and plain.text == UNK
    assert copied.source_words == ["the", "Zorglub", "sleeps"] and copied.text == "Zorglub"
    assert translated[0][0].text == "Zorglüb"


def test_unk_replacement_needs_attention():
    model = UnkThenEos(5, 0)
    model.has_attention = False
    with pytest.raises(ValueError, match="attention"):
        Translator(model, GreedySearch(), *[Vocabulary(SPECIALS)] * 2, None, None, UnkReplacer())


def test_the_no_unk_subset_excludes_unknowns_on_either_side_but_not_padding():
    src = torch.tensor([[5, 6, EOS_ID], [5, UNK_ID, EOS_ID], [7, EOS_ID, PAD_ID], [8, EOS_ID, 0]])
    tgt = torch.tensor(
        [[9, EOS_ID, PAD_ID], [9, EOS_ID, PAD_ID], [9, 9, EOS_ID], [UNK_ID, EOS_ID, 0]]
    )
    assert no_unk_mask(src, tgt).tolist() == [True, False, True, False]
