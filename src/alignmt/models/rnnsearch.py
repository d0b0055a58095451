"""RNNsearch (Bahdanau, Cho and Bengio 2014), as in the paper's appendix A."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from alignmt.models.attention import AdditiveAttention, Attention
from alignmt.models.coverage import Coverage, with_coverage
from alignmt.models.encoder import EncoderOutput, RNNEncoder
from alignmt.models.functional import gru_update
from alignmt.models.fused_recurrence import (
    AdditiveGRURecurrence,
    Refeed,
    coverage_inputs,
    refeed_inputs,
    runs_fused,
)
from alignmt.models.init import initialise, orthogonal_blocks_
from alignmt.models.readout import MaxoutReadout
from alignmt.models.seq2seq import Decoder, DecoderState, Memory, Seq2Seq
from alignmt.models.step_linear import PackedReadout, project
from alignmt.sampling import MixedFeed
from alignmt.special_tokens import PAD_ID


class RNNSearchDecoder(Decoder):
    """The paper's decoder. At step i, with previous state s_{i-1} and previous word y_{i-1}:

        e_ij = a(s_{i-1}, h_j)                   attention queried with the *previous* state
        c_i  = sum_j alpha_ij h_j
        s_i  = GRU(s_{i-1}, [E y_{i-1}; c_i])
        p(y_i) = softmax(W_o maxout(U_o s_{i-1} + V_o E y_{i-1} + C_o c_i))
        s_0  = tanh(W_s h<-_1)                   from the backward encoder's first annotation

    Joey NMT, OpenNMT-py and fairseq call their decoders "Bahdanau" but use Luong's ordering
    (run the RNN first, then attend with the new state); this one keeps the paper's ordering.
    The GRU cell uses the cuDNN placement of the reset gate (after the recurrent matrix), like
    every PyTorch GRU, including this model's encoder.

    Teacher forcing on CPUs runs the recurrence as one hand-written autograd function when the
    attention declares plain additive energies (`fused_energy_weights`), with a coverage model
    inside if it declares a fused cell; the output layer then runs once over all steps. So does
    scheduled sampling without active readout dropout: inside the recurrence only the rows that
    are fed their own prediction pass through the output layer, without gradients.
    """

    has_attention = True

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        context_size: int,
        maxout_size: int,
        attention: Attention,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD_ID)
        self.attention = attention
        self.init_proj = nn.Linear(context_size // 2, hidden_size)  # W_s
        # GRU gates [r, z, n]: input part W [E y; c] split so the E y part runs for all steps.
        self.embedding_proj = nn.Linear(embedding_dim, 3 * hidden_size)
        self.context_proj = nn.Linear(context_size, 3 * hidden_size, bias=False)
        self.recurrent_proj = nn.Linear(hidden_size, 3 * hidden_size)  # U (orthogonal in the paper)
        self.maxout = MaxoutReadout(
            hidden_size + embedding_dim + context_size, maxout_size, vocab_size, dropout=dropout
        )

    @property
    def beams_share_memory(self) -> bool:
        return self.attention.stateless

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        backward_first = encoded.final[:, encoded.final.size(1) // 2 :]
        state = {
            "hidden": torch.tanh(self.init_proj(backward_first)),
            "attention": self.attention.init_state(encoded.states, encoded.mask),
        }
        keys = self.attention.precompute(encoded.states)
        return Memory(encoded.states, keys, encoded.mask), state

    def step(self, prev_tokens, memory, state):
        embedded = self.embedding(prev_tokens)
        hidden = state["hidden"]
        context, alpha, attention_state = self.attention(
            hidden, memory.keys, memory.values, memory.mask, state["attention"]
        )
        gates_x = project(self.embedding_proj, embedded) + project(self.context_proj, context)
        new_hidden = gru_update(hidden, gates_x, project(self.recurrent_proj, hidden))
        features = torch.cat([hidden, embedded, context], dim=-1)
        return features, {"hidden": new_hidden, "attention": attention_state}, alpha

    def readout(self, features):
        return self.maxout(features)

    def split_readout(self):
        return self.maxout.hidden, self.maxout.output

    def teacher_forced(self, tgt_in, memory, state):
        return self._fused(tgt_in, memory, state)

    def scheduled(self, tgt_in, memory, state, feed):
        if not isinstance(feed, MixedFeed) or (self.training and self.maxout.dropout.p > 0):
            return None  # the logits that choose would need the readout's dropout masks

        readout = PackedReadout(*self.split_readout(), tgt_in.size(0))

        def logits_of(rows, tokens, hidden, context):
            features = [hidden[rows], self.embedding(tokens[rows]), context[rows]]
            return readout(torch.cat(features, dim=-1))

        return self._fused(tgt_in, memory, state, Refeed(feed, tgt_in, logits_of))

    def _fused(self, tgt_in, memory, state, refeed: Refeed | None = None):
        energy = self.attention.fused_energy_weights(coverage=True)
        coverage = coverage_inputs(self.attention, state["attention"])
        if energy is None or coverage is None or not runs_fused(self.embedding.weight):
            return None
        w_q, b_q, v = energy
        proj, embedded = self.embedding_proj, self.embedding(tgt_in)  # [B, T, E]
        hiddens, contexts, weights = AdditiveGRURecurrence.apply(
            proj(embedded),
            state["hidden"],
            memory.keys,
            memory.values,
            memory.mask,
            torch.cat([w_q, self.recurrent_proj.weight]),
            torch.cat([b_q, self.recurrent_proj.bias]),
            v,
            self.context_proj.weight,
            *refeed_inputs(refeed, self.embedding.weight, proj.weight, proj.bias),
            *coverage,
        )
        if refeed is not None:  # the readout reads the inputs as fed
            embedded = self.embedding(refeed.tokens)
        return torch.cat([hiddens, embedded, contexts], dim=-1), weights

    def paper_init_(self) -> None:
        orthogonal_blocks_(self.recurrent_proj.weight)
        self.attention.paper_init_()


class RNNSearch(Seq2Seq):
    """Bidirectional GRU encoder + RNNsearch decoder. Paper sizes: 620 / 1000 / 1000 / 500 / 1000
    (embedding / encoder / decoder / maxout / attention). `copy` (model/copy=pointer_generator)
    wraps the decoder in a pointer-generator."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embedding_dim: int = 620,
        encoder_hidden_size: int = 1000,
        decoder_hidden_size: int = 1000,
        maxout_size: int = 500,
        attention: Callable[..., Attention] | None = None,
        coverage: Callable[..., Coverage] | None = None,
        dropout: float = 0.0,
        init: str = "default",
        copy: Callable[..., Decoder] | None = None,
    ):
        encoder = RNNEncoder(src_vocab_size, embedding_dim, encoder_hidden_size, bidirectional=True)
        attention = (attention or AdditiveAttention)(
            query_size=decoder_hidden_size, key_size=encoder.output_size
        )
        decoder = RNNSearchDecoder(
            tgt_vocab_size,
            embedding_dim,
            decoder_hidden_size,
            encoder.output_size,
            maxout_size,
            with_coverage(attention, coverage),
            dropout=dropout,
        )
        if copy is not None:  # the pointer-generator's switch reads [s_{i-1}; E y_{i-1}; c_i]
            features = decoder_hidden_size + embedding_dim + encoder.output_size
            decoder = copy(decoder=decoder, feature_size=features, vocab_size=tgt_vocab_size)
        super().__init__(encoder, decoder)
        initialise(self, init)
