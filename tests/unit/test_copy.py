"""The pointer-generator against its definition: extended ids, the mixture, copying an unknown
source word through greedy and beam search, the loss on extended targets."""

from functools import partial
from types import SimpleNamespace

import pytest
import torch

from alignmt.config import CONF_DIR, instantiate
from alignmt.data.annotations import copy_ids, with_copy_ids
from alignmt.data.batching import collate
from alignmt.data.tokenizers import WhitespaceTokenizer
from alignmt.data.vocab import Vocabulary
from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import GeneralAttention
from alignmt.models.copy import PointerGenerator, WithSourceCopy
from alignmt.objectives import MaximumLikelihood
from alignmt.sampling import TeacherForcing
from alignmt.special_tokens import EOS_ID, SPECIALS, UNK_ID
from alignmt.translator import Translator
from tests.conftest import compose_config

SOURCE = Vocabulary([*SPECIALS, "the", "sleeps"])
TARGET = Vocabulary([*SPECIALS, "the", "dog"])  # 6 ids: an unknown word copies to 6, 7, ...


def test_extended_ids_number_the_source_words_the_target_vocabulary_lacks():
    ids = copy_ids(["the", "Zorglub", "sleeps", "Zorglub"], ["the", "Zorglub", "barks"], TARGET)
    assert ids.source == [4, 6, 7, 6, EOS_ID]
    assert ids.target == [4, 6, UNK_ID, EOS_ID]  # "barks" is in neither: [UNK]
    assert ids.words == ["Zorglub", "sleeps"]


def rnnsearch(**options):
    torch.manual_seed(0)
    copy = partial(PointerGenerator)
    return RNNSearch(len(SOURCE), len(TARGET), 8, 6, 10, 4, copy=copy, **options)


def luong(**options):
    torch.manual_seed(0)
    copy = partial(PointerGenerator)
    return Luong(
        len(SOURCE),
        len(TARGET),
        8,
        8,
        1,
        attention=GeneralAttention,
        copy=copy,
        input_feeding=False,
        **options,
    )


def batch_of(pairs):
    """pairs of (source words, target words) -> a batch with its copy ids."""
    items = [
        (i, torch.tensor([*SOURCE.encode(s), EOS_ID]), torch.tensor(TARGET.encode(t)))
        for i, (s, t) in enumerate(pairs)
    ]
    return with_copy_ids(collate(items), [copy_ids(s, t, TARGET) for s, t in pairs])


PAIRS = [
    (["the", "Zorglub", "sleeps"], ["the", "Zorglub", "dog"]),
    (["Blorp", "the"], ["dog", "Blorp"]),
]


def test_the_mixture_is_p_gen_vocabulary_plus_one_minus_p_gen_attention():
    model = rnnsearch().eval()
    batch = batch_of(PAIRS)
    memory, state = model.start(batch.src, batch.src_lengths, batch.src_copy)
    copier = model.decoder
    features, _, alpha = copier.decoder.step(batch.tgt_in[:, 0], memory, state["decoder"])
    log_probs, _, _ = model.step(batch.tgt_in[:, 0], memory, state)
    p_gen = torch.sigmoid(copier.switch(features))
    vocabulary = torch.softmax(copier.decoder.readout(features), -1)
    expected = torch.zeros(2, 8)  # 6 target ids + 2 extended (sentence 0: Zorglub, sleeps)
    expected[:, :6] = p_gen * vocabulary
    for b in range(2):
        for j, v in enumerate(batch.src_copy[b].tolist()):
            expected[b, v] += (1 - p_gen[b, 0]) * alpha[b, j]
    torch.testing.assert_close(log_probs.exp(), expected.clamp_min(1e-30))
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2))


@pytest.mark.parametrize("make", [rnnsearch, luong])
def test_teacher_forcing_equals_the_step_path(make):
    model = make().eval()
    batch = batch_of(PAIRS)
    out = model(batch.src, batch.src_lengths, batch.tgt_in, src_copy=batch.src_copy)
    memory, state = model.start(batch.src, batch.src_lengths, batch.src_copy)
    stepped = []
    for t in range(batch.tgt_in.size(1)):
        log_probs, state, _ = model.step(batch.tgt_in[:, t], memory, state)
        stepped.append(log_probs)
    torch.testing.assert_close(out.logits, torch.stack(stepped, 1), atol=1e-5, rtol=1e-5)


def test_a_copied_word_fed_back_is_read_as_unk():
    model = rnnsearch().eval()
    batch = batch_of(PAIRS)
    memory, state = model.start(batch.src, batch.src_lengths, batch.src_copy)
    copied, _, _ = model.step(torch.tensor([6, 6]), memory, state)
    unknown, _, _ = model.step(torch.tensor([UNK_ID, UNK_ID]), memory, state)
    torch.testing.assert_close(copied, unknown)


def always_copying(make):
    """p_gen = 0: the output distribution is the attention over the source words."""
    model = make().eval()
    with torch.no_grad():
        model.decoder.switch.weight.zero_()
        model.decoder.switch.bias.fill_(-60.0)
    return model


@pytest.mark.parametrize("make", [rnnsearch, luong])
@pytest.mark.parametrize(
    "search", [GreedySearch(min_length=1, max_length=1), BeamSearch(3, min_length=1, max_length=1)]
)
def test_with_p_gen_zero_the_most_attended_source_word_is_produced(make, search):
    model = always_copying(make)
    translator = Translator(
        model, search, SOURCE, TARGET, WhitespaceTokenizer(), WhitespaceTokenizer()
    )
    sentence = "Zorglub sleeps Blorp"  # none of them in the target vocabulary
    translation = translator.translate([sentence])[0][0]
    # One word, not [EOS]: the word of the most attended source position at the first step.
    src = torch.tensor([[*SOURCE.encode(sentence.split()), EOS_ID]])
    ids = copy_ids(sentence.split(), [], TARGET)
    memory, state = model.start(src, torch.tensor([4]), torch.tensor([ids.source]))
    _, _, alpha = model.step(torch.tensor([2]), memory, state)
    words = sentence.split()
    best = int(alpha[0, :3].argmax())
    assert translation.tokens == [words[best]]
    assert translation.ids == [ids.source[best]] and ids.source[best] >= len(TARGET)


def test_training_scores_the_extended_targets():
    model = rnnsearch()
    batch = batch_of(PAIRS)
    task = SimpleNamespace(model=model, sampling=TeacherForcing(), global_step=0)
    torch.manual_seed(1)
    loss, out, _ = MaximumLikelihood()(task, batch)
    targets = batch.tgt_copy
    assert targets[0, 1] == 6 and batch.tgt_out[0, 1] == UNK_ID  # Zorglub, copied
    real = targets != 0
    picked = out.logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(loss, -picked.masked_select(real).mean())
    loss.backward()
    assert model.decoder.switch.weight.grad.abs().sum() > 0


def test_copy_ids_are_required_by_a_copying_model_and_refused_by_others():
    batch = batch_of(PAIRS)
    with pytest.raises(ValueError, match=r"data\.copy_ids=true"):
        rnnsearch().start(batch.src, batch.src_lengths)
    plain = RNNSearch(len(SOURCE), len(TARGET), 8, 6, 10, 4)
    with pytest.raises(ValueError, match="model/copy=pointer_generator"):
        plain.start(batch.src, batch.src_lengths, batch.src_copy)


def test_a_selected_batch_keeps_its_copy_ids_row_by_row():
    batch = batch_of(PAIRS)
    second = batch.select([1])
    assert second.src_copy.tolist() == [copy_ids(*PAIRS[1], TARGET).source]
    assert second.extended_words == [["Blorp"]]
    assert second.output_targets.tolist() == batch.tgt_copy[1:].tolist()


ATTENTIONS = sorted(p.stem for p in (CONF_DIR / "model" / "attention").glob("*.yaml"))
COPY = ["model/copy=pointer_generator"]
SIZES = {
    "model=rnnsearch": dict(
        embedding_dim=8, encoder_hidden_size=6, decoder_hidden_size=12, maxout_size=4
    ),
    "model=luong": dict(embedding_dim=8, hidden_size=12),  # dot needs equal sizes
}


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_every_attention_variant_copies(attention):
    family = "model=luong" if attention in ("dot", "location") else "model=rnnsearch"
    cfg = compose_config("train", [family, f"model/attention={attention}", *COPY])
    torch.manual_seed(0)
    sizes = SIZES[family]
    model = instantiate(cfg.model, src_vocab_size=len(SOURCE), tgt_vocab_size=len(TARGET), **sizes)
    model.eval()
    batch = batch_of(PAIRS)
    out = model(batch.src, batch.src_lengths, batch.tgt_in, src_copy=batch.src_copy)
    torch.testing.assert_close(out.logits.exp().sum(-1), torch.ones(2, 4))
    memory, state = model.start(batch.src, batch.src_lengths, batch.src_copy)
    first, _, _ = model.step(batch.tgt_in[:, 0], memory, state)
    torch.testing.assert_close(first, out.logits[:, 0], atol=1e-5, rtol=1e-5)
    hypotheses = BeamSearch(2, max_length=3)(
        WithSourceCopy(model, batch.src_copy), batch.src, batch.src_lengths
    )
    assert all(len(nbest[0].tokens) <= 3 for nbest in hypotheses)
