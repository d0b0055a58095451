"""Supervised attention: the loss by hand, gold links brought to tokens, gold reaching the
training batches of the real toy corpus, and training that moves attention onto the gold."""

import math

import pytest
import torch

from alignmt.config import instantiate
from alignmt.data.annotations import gold_links
from alignmt.evaluation.alignment import alignment_error_rate, hard_alignment, parse_gold
from alignmt.models import RNNSearch
from alignmt.models.attention.supervision import alignment_loss
from alignmt.special_tokens import PAD_ID


def test_the_loss_is_the_cross_entropy_to_the_normalised_gold_rows():
    weights = torch.tensor([[[0.5, 0.25, 0.25], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]]])
    gold = torch.tensor([[[1.0, 1, 0], [0, 0, 0], [0, 0, 1], [1, 0, 0]]])
    mask = torch.tensor([[True, True, True, False]])  # the last row is padding
    # Row 0: gold (1/2, 1/2, 0): -(log 0.5 + log 0.25) / 2; row 1 has no link; row 2: -log 0.8.
    expected = ((math.log(2) + math.log(4)) / 2 + -math.log(0.8)) / 2
    assert float(alignment_loss(weights, gold, mask)) == pytest.approx(expected)


def test_gold_word_links_reach_every_token_of_the_linked_words():
    # Source words: "ab" -> tokens 0, 1; "c" -> token 2. Target words: "x" -> 0; "yz" -> 1, 2.
    links = gold_links("0-1 1-0", source_word_ids=[0, 0, 1], target_word_ids=[0, 1, 1])
    assert links.tolist() == [[0, 0, 1], [1, 1, 0], [1, 1, 0]]
    with pytest.raises(ValueError, match="outside"):
        gold_links("2-0", [0, 1], [0])


def test_training_batches_carry_the_gold_links_of_their_pairs(compose_train):
    cfg = compose_train()
    datamodule = instantiate(cfg.data, seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    datamodule.carry_gold_alignments()
    batch = next(iter(datamodule.train_dataloader()))
    text = datamodule.text["train"]
    assert batch.alignment.shape == (*batch.tgt_out.shape, batch.src.size(1))
    for row, i in enumerate(batch.indices.tolist()):
        sure, _ = parse_gold(text.alignments[i])
        T = int((batch.tgt_out[row] != PAD_ID).sum()) - 1
        links = {(s, t) for t, s in batch.alignment[row].nonzero().tolist()}
        assert links == sure and all(t < T for _, t in links)  # no link on [EOS] or padding
    assert next(iter(datamodule.val_dataloader())).alignment is None  # training only


def monotone_batch():
    """Gold: target word t is source word t (a diagonal), sentences of 6 words."""
    torch.manual_seed(3)
    src = torch.cat([torch.randint(4, 20, (8, 6)), torch.full((8, 1), 3)], 1)
    tgt = torch.randint(4, 20, (8, 6))
    tgt_in = torch.cat([torch.full((8, 1), 2), tgt], 1)
    tgt_out = torch.cat([tgt, torch.full((8, 1), 3)], 1)
    gold = torch.zeros(8, 7, 7)
    gold[:, torch.arange(6), torch.arange(6)] = 1.0
    return src, torch.full((8,), 7), tgt_in, tgt_out, gold


def train_and_align(weight: float) -> tuple[float, float]:
    """AER of the teacher-forced attention after 40 Adam steps, and its mass on the gold."""
    src, lengths, tgt_in, tgt_out, gold = monotone_batch()
    torch.manual_seed(0)
    model = RNNSearch(20, 20, 8, 8, 16, 8)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    mask = tgt_out != PAD_ID
    for _ in range(40):
        out = model(src, lengths, tgt_in)
        loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), tgt_out.flatten())
        loss = loss + weight * alignment_loss(out.attention, gold, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        attention = model.eval()(src, lengths, tgt_in).attention[:, :6, :6]
    predicted = [hard_alignment(a.numpy()) for a in attention]
    diagonal = [{(t, t) for t in range(6)}] * 8
    return alignment_error_rate(predicted, diagonal), float(attention.diagonal(0, 1, 2).mean())


def test_supervision_moves_attention_onto_the_gold_and_lowers_aer():
    unsupervised_aer, unsupervised_mass = train_and_align(0.0)
    supervised_aer, supervised_mass = train_and_align(1.0)
    assert supervised_mass > 2 * unsupervised_mass
    assert supervised_aer < 0.5 * unsupervised_aer
