from functools import partial

import torch
import torch.nn.functional as F

from alignmt.models import RNNSearch
from alignmt.models.attention import AdditiveAttention
from alignmt.models.coverage import coverage_loss
from alignmt.special_tokens import PAD_ID


def make():
    torch.manual_seed(0)
    return RNNSearch(
        30,
        25,
        embedding_dim=12,
        encoder_hidden_size=10,
        decoder_hidden_size=14,
        maxout_size=8,
        attention=partial(AdditiveAttention, attention_size=9),
    ).double()


def batch():
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0], [11, 3, 0, 0, 0]])
    tgt_in = torch.tensor([[2, 5, 6, 7, 8], [2, 8, 9, 0, 0], [2, 10, 11, 12, 0]])
    tgt_out = torch.tensor([[5, 6, 7, 8, 3], [8, 9, 3, 0, 0], [10, 11, 12, 3, 0]])
    return src, torch.tensor([5, 3, 2]), tgt_in, tgt_out


def loss_and_grads(model, fused: bool):
    model.decoder.fused = fused
    model.zero_grad()
    src, lengths, tgt_in, tgt_out = batch()
    out = model(src, lengths, tgt_in)
    loss = F.cross_entropy(out.logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
    loss = loss + coverage_loss(out.attention, tgt_out != PAD_ID)  # gradients through alpha too
    loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


def test_fused_recurrence_matches_autograd_values_and_gradients():
    model = make()
    reference, reference_grads = loss_and_grads(model, fused=False)
    fused, fused_grads = loss_and_grads(model, fused=True)
    torch.testing.assert_close(fused.logits, reference.logits, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(fused.attention, reference.attention, atol=1e-10, rtol=1e-8)
    for name, grad in reference_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-10, rtol=1e-7, msg=name)
