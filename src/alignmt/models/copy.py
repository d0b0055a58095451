"""The pointer-generator (See et al. 2017): a decoder that can copy source words, also those
outside its target vocabulary.

At every step a switch p_gen = sigmoid(w . f + b) on the decoder's readout features f (for
RNNsearch [s_{i-1}; E y_{i-1}; c_i], See et al.'s state, input and context; for Luong the
attentional state h~_t) mixes the vocabulary distribution with the attention distribution
over the source tokens:

    P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{j: x_j = w} alpha_j

over the batch's extended vocabulary: the target vocabulary, then one id per distinct source
word it lacks (`alignmt.data.annotations`). An unknown source word is thus produced by its
own id, not as [UNK]; the translator maps those ids back to the words.
"""

from __future__ import annotations

import torch
from torch import nn

from alignmt.models.encoder import EncoderOutput
from alignmt.models.seq2seq import Decoder, DecoderState, Memory
from alignmt.special_tokens import UNK_ID

# The smallest probability a word gets: an extended id no attention reaches (a window that
# excludes it, a hard choice elsewhere) has a finite log-probability and gradients stay finite.
PROBABILITY_FLOOR = 1e-30


class PointerGenerator(Decoder):
    """Wraps an attention decoder. Its step returns log-probabilities over the extended
    vocabulary (they sum to 1, so searches' log_softmax leaves them unchanged), and its
    readout is the identity. Inputs with extended ids (a copied word fed back) enter the
    wrapped decoder as [UNK]. The wrapped decoder's teacher-forcing fast path is used where it
    has one. The attention weights are renormalised before copying, so that variants whose
    weights do not sum to 1 (local-p) still give a distribution."""

    copies_source = True
    has_attention = True

    def __init__(self, decoder: Decoder, feature_size: int, vocab_size: int):
        super().__init__()
        if not decoder.has_attention:
            raise ValueError("model/copy=pointer_generator needs a model with attention")
        self.decoder = decoder
        self.vocab_size = vocab_size
        self.switch = nn.Linear(feature_size, 1)  # p_gen = sigmoid(w . f + b_ptr)

    def start(self, encoded: EncoderOutput, src_copy: torch.Tensor | None = None):
        if src_copy is None:
            raise ValueError(
                "model/copy=pointer_generator needs each batch's copy ids (data.copy_ids=true)"
            )
        memory, state = self.decoder.start(encoded)
        return memory, {"decoder": state, "copy": src_copy}

    def step(self, prev_tokens, memory: Memory, state: DecoderState):
        inputs = self._known(prev_tokens)
        features, inner, alpha = self.decoder.step(inputs, memory, state["decoder"])
        log_probs = self.mix(features, alpha, state["copy"])
        return log_probs, {"decoder": inner, "copy": state["copy"]}, alpha

    def readout(self, features: torch.Tensor) -> torch.Tensor:
        return features

    def teacher_forced(self, tgt_in, memory, state):
        fast = self.decoder.teacher_forced(self._known(tgt_in), memory, state["decoder"])
        if fast is None:
            return None
        features, attention = fast
        return self.mix(features, attention, state["copy"]), attention

    def paper_init_(self) -> None:
        self.decoder.paper_init_()

    def _known(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.masked_fill(tokens >= self.vocab_size, UNK_ID)

    def mix(
        self, features: torch.Tensor, attention: torch.Tensor, src_copy: torch.Tensor
    ) -> torch.Tensor:
        """log P over the extended vocabulary [.., V + n] from readout features [.., F] and
        attention [.., S] (one step [B, ..] or all steps [B, T, ..]); src_copy [B, S]."""
        single = features.dim() == 2
        if single:
            features, attention = features.unsqueeze(1), attention.unsqueeze(1)
        vocabulary = torch.softmax(self.decoder.readout(features).float(), dim=-1)
        B, T, V = vocabulary.shape
        size = max(V, int(src_copy.max()) + 1)
        generate = torch.sigmoid(self.switch(features).float())  # [B, T, 1]
        weights = attention.float()
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(PROBABILITY_FLOOR)
        copied = vocabulary.new_zeros(B, T, size).scatter_add(
            2, src_copy.unsqueeze(1).expand(B, T, -1), (1 - generate) * weights
        )
        mixed = copied + nn.functional.pad(generate * vocabulary, (0, size - V))
        log_probs = mixed.clamp_min(PROBABILITY_FLOOR).log()
        return log_probs.squeeze(1) if single else log_probs


class WithSourceCopy:
    """A model as a search sees it, with one batch's copy ids bound to `start`: searches call
    `model.start(src, src_lengths)` and `model.step` only, on the rows of that batch."""

    def __init__(self, model, src_copy: torch.Tensor):
        self.model = model
        self.src_copy = src_copy

    def start(self, src: torch.Tensor, src_lengths: torch.Tensor):
        return self.model.start(src, src_lengths, self.src_copy)

    def __getattr__(self, name: str):
        return getattr(self.model, name)
