"""RNNsearch (Bahdanau, Cho and Bengio 2014), as in the paper's appendix A."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from alignmt.models.attention import AdditiveAttention, Attention
from alignmt.models.coverage import Coverage, with_coverage
from alignmt.models.encoder import EncoderOutput, RNNEncoder
from alignmt.models.fused_recurrence import AdditiveGRURecurrence
from alignmt.models.init import initialise
from alignmt.models.readout import MaxoutReadout
from alignmt.models.seq2seq import Decoder, DecoderOutput, DecoderState, Memory, Seq2Seq
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

    Under teacher forcing only the attention and the GRU recurrence run step by step: the input
    projections of all E y_{i-1} and the whole deep output are single matmuls over all steps.
    The GRU cell uses the cuDNN placement of the reset gate (after the recurrent matrix), like
    every PyTorch GRU, including this model's encoder.
    """

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
        self.readout = MaxoutReadout(
            hidden_size + embedding_dim + context_size, maxout_size, vocab_size, dropout=dropout
        )
        # Teacher forcing through the hand-written recurrence when attention is plain additive,
        # on CPUs, where per-step overheads dominate (GPUs keep autograd and mixed precision).
        self.fused = type(attention) is AdditiveAttention

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        backward_first = encoded.final[:, encoded.final.size(1) // 2 :]
        hidden = torch.tanh(self.init_proj(backward_first))
        keys = self.attention.precompute(encoded.states)
        state = {"hidden": hidden}
        attention_state = self.attention.init_state(encoded.states, encoded.mask)
        if attention_state is not None:
            state["attention"] = attention_state
        return Memory(encoded.states, keys, encoded.mask), state

    def _gru(self, hidden, embedded_gates, context):
        gates_x = embedded_gates + self.context_proj(context)
        gates_h = self.recurrent_proj(hidden)
        H = self.hidden_size
        r, z = torch.sigmoid(gates_x[:, : 2 * H] + gates_h[:, : 2 * H]).chunk(2, dim=1)
        n = torch.tanh(gates_x[:, 2 * H :] + r * gates_h[:, 2 * H :])
        return n + z * (hidden - n)

    def forward(self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState) -> DecoderOutput:
        embedded = self.embedding(tgt_in)  # [B, T, E]
        embedded_gates = self.embedding_proj(embedded)  # the E y part of the GRU input, all steps
        if self.fused and "attention" not in state and not embedded_gates.is_cuda:
            hiddens, contexts, weights = self._fused_recurrence(embedded_gates, memory, state)
        else:
            hiddens, contexts, weights = self._recurrence(embedded_gates, memory, state)
        logits = self.readout(hiddens, embedded, contexts)
        return DecoderOutput(logits, weights)

    def _recurrence(self, embedded_gates, memory: Memory, state: DecoderState):
        hidden, attn_state = state["hidden"], state.get("attention")
        hiddens, contexts, weights = [], [], []
        for t in range(embedded_gates.size(1)):
            context, alpha, attn_state = self.attention(
                hidden, memory.keys, memory.values, memory.mask, attn_state
            )
            hiddens.append(hidden)
            contexts.append(context)
            weights.append(alpha)
            hidden = self._gru(hidden, embedded_gates[:, t], context)
        return torch.stack(hiddens, 1), torch.stack(contexts, 1), torch.stack(weights, 1)

    def _fused_recurrence(self, embedded_gates, memory: Memory, state: DecoderState):
        attention = self.attention
        return AdditiveGRURecurrence.apply(
            embedded_gates,
            state["hidden"],
            memory.keys,
            memory.values,
            memory.mask,
            torch.cat([attention.query_proj.weight, self.recurrent_proj.weight]),
            torch.cat([attention.query_proj.bias, self.recurrent_proj.bias]),
            attention.energy.weight.view(-1),
            self.context_proj.weight,
        )

    def step(self, prev_tokens, memory, state):
        embedded = self.embedding(prev_tokens)
        hidden = state["hidden"]
        context, alpha, attention_state = self.attention(
            hidden, memory.keys, memory.values, memory.mask, state.get("attention")
        )
        logits = self.readout(hidden, embedded, context)
        new_state = {"hidden": self._gru(hidden, self.embedding_proj(embedded), context)}
        if attention_state is not None:
            new_state["attention"] = attention_state
        return logits, new_state, alpha


class RNNSearch(Seq2Seq):
    """Bidirectional GRU encoder + RNNsearch decoder. Paper sizes: 620 / 1000 / 1000 / 500 / 1000
    (embedding / encoder / decoder / maxout / attention)."""

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
    ):
        encoder = RNNEncoder(src_vocab_size, embedding_dim, encoder_hidden_size, bidirectional=True)
        attention = attention or AdditiveAttention
        decoder = RNNSearchDecoder(
            tgt_vocab_size,
            embedding_dim,
            decoder_hidden_size,
            encoder.output_size,
            maxout_size,
            with_coverage(
                attention(query_size=decoder_hidden_size, key_size=encoder.output_size), coverage
            ),
            dropout=dropout,
        )
        super().__init__(encoder, decoder)
        initialise(self, init)
