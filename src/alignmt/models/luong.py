"""The attention decoders of Luong, Pham and Manning 2015 ("Effective approaches...")."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from alignmt.models.attention import Attention
from alignmt.models.coverage import Coverage, with_coverage
from alignmt.models.encoder import RNN_TYPES, EncoderOutput, RNNEncoder
from alignmt.models.functional import gru_update
from alignmt.models.fused_recurrence import (
    LuongGRURecurrence,
    Refeed,
    coverage_inputs,
    refeed_inputs,
    runs_fused,
)
from alignmt.models.init import initialise
from alignmt.models.seq2seq import Decoder, DecoderState, Memory, Seq2Seq
from alignmt.models.step_linear import PackedReadout, gru_gates, project
from alignmt.sampling import MixedFeed
from alignmt.special_tokens import PAD_ID


class LuongDecoder(Decoder):
    """A stacked LSTM/GRU that attends with its *new* top state h_t:

        h_t = RNN(h_{t-1}, [E y_{t-1}; h~_{t-1}])      (h~_{t-1} only with input feeding)
        c_t = attend(h_t),   h~_t = tanh(W_c [c_t; h_t]),   p(y_t) = softmax(W_s h~_t)

    Without attention (Luong's "base" rows) p(y_t) = softmax(W_s h_t). Without input feeding,
    teacher forcing runs the RNN over the whole target in one call, and the attention for all
    steps as one batched product (or step by step where it is sequential, as with coverage).

    The initial state is the encoder's final state, layer by layer, when both sides have the
    same cell, size and depth (Luong's setting); otherwise a learned bridge tanh(W [h->; h<-])
    from the encoder's top layer (memory cells start at zero).
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        num_layers: int,
        rnn_type: str,
        encoder: RNNEncoder,
        attention: Attention | None,
        input_feeding: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        if input_feeding and attention is None:
            raise ValueError(
                "model.input_feeding needs attention (it was removed: ~model/attention)"
            )
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.is_lstm = rnn_type == "lstm"
        self.input_feeding = input_feeding
        self.has_attention = attention is not None
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD_ID)
        self.rnn = RNN_TYPES[rnn_type](
            embedding_dim + (hidden_size if input_feeding else 0),
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.attention = attention
        self.combine = (
            nn.Linear(encoder.output_size + hidden_size, hidden_size, bias=False)
            if attention is not None
            else None
        )  # W_c
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden_size, vocab_size)  # W_s
        copies = (
            not encoder.bidirectional
            and encoder.rnn_type == rnn_type
            and encoder.hidden_size == hidden_size
            and encoder.num_layers == num_layers
        )
        self.bridge = None if copies else nn.Linear(encoder.output_size, num_layers * hidden_size)

    @property
    def beams_share_memory(self) -> bool:
        return self.attention is None or self.attention.stateless

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        B = encoded.states.size(0)
        if self.bridge is None:
            state = {"hidden": encoded.hidden}
            if self.is_lstm:
                state["cell"] = encoded.cell
        else:
            hidden = torch.tanh(self.bridge(encoded.final)).view(B, self.num_layers, -1)
            state = {"hidden": hidden}
            if self.is_lstm:
                state["cell"] = torch.zeros_like(hidden)
        if self.input_feeding:
            state["feed"] = encoded.states.new_zeros(B, self.hidden_size)
        keys = None
        if self.attention is not None:
            keys = self.attention.precompute(encoded.states)
            state["attention"] = self.attention.init_state(encoded.states, encoded.mask)
        return Memory(encoded.states, keys, encoded.mask), state

    def _rnn(self, inputs: torch.Tensor, state: DecoderState):
        """The stacked RNN over inputs [B, T, I] -> (top states [B, T, H], next state)."""
        hidden = state["hidden"].transpose(0, 1).contiguous()
        if self.is_lstm:
            hidden = (hidden, state["cell"].transpose(0, 1).contiguous())
        tops, final = self.rnn(inputs, hidden)
        if self.is_lstm:
            return tops, {"hidden": final[0].transpose(0, 1), "cell": final[1].transpose(0, 1)}
        return tops, {"hidden": final.transpose(0, 1)}

    def _rnn_step(self, x: torch.Tensor, state: DecoderState):
        """One step of the RNN on inputs [B, I] -> (top state [B, H], next state). Outside
        autograd a one-layer GRU steps by its two products (step_linear.gru_gates: weights
        packed once per search, or quantized), where torch.nn.GRU's own call for one step costs
        more than the products."""
        gates = gru_gates(self.rnn, x.size(0))
        if gates is not None:
            hidden = state["hidden"][:, 0]
            top = gru_update(hidden, *gates(x, hidden))
            return top, {"hidden": top.unsqueeze(1)}
        tops, new_state = self._rnn(x.unsqueeze(1), state)
        return tops.squeeze(1), new_state

    def _attend(self, top, memory: Memory, state: DecoderState):
        """top [B, (T,) H] -> dropped-out attentional states h~, weights, attention state."""
        if self.attention is None:
            return self.dropout(top), None, None
        context, weights, attention_state = self.attention(
            top, memory.keys, memory.values, memory.mask, state["attention"]
        )
        attentional = torch.tanh(project(self.combine, torch.cat([context, top], dim=-1)))
        if self.training:
            attentional = self.dropout(attentional)
        return attentional, weights, attention_state

    def step(self, prev_tokens, memory, state):
        embedded = self.embedding(prev_tokens)
        if self.training:  # dropout is the identity otherwise: no module call per search step
            embedded = self.dropout(embedded)
        x = torch.cat([embedded, state["feed"]], dim=-1) if self.input_feeding else embedded
        top, new_state = self._rnn_step(x, state)
        attentional, alpha, attention_state = self._attend(top, memory, state)
        if self.input_feeding:
            new_state["feed"] = attentional
        if attention_state is not None:
            new_state["attention"] = attention_state
        return attentional, new_state, alpha

    def readout(self, features):
        return self.output(features)

    def split_readout(self):
        return (lambda features: features), self.output

    def teacher_forced(self, tgt_in, memory, state):
        if self.input_feeding:  # each step's input waits for the previous h~
            return self._fused_input_feeding(tgt_in, memory, state)
        tops, _ = self._rnn(self.dropout(self.embedding(tgt_in)), state)
        attentional, weights, _ = self._attend(tops, memory, state)
        return attentional, weights

    def scheduled(self, tgt_in, memory, state, feed):
        if not (self.input_feeding and isinstance(feed, MixedFeed)):
            return None
        readout = PackedReadout(*self.split_readout(), tgt_in.size(0))
        refeed = Refeed(feed, tgt_in, lambda rows, tokens, feeds: readout(feeds[rows]))
        return self._fused_input_feeding(tgt_in, memory, state, refeed)

    def _fused_input_feeding(self, tgt_in, memory, state, refeed: Refeed | None = None):
        """Input feeding through the hand-written recurrence (fused_recurrence.py), where it
        applies: one GRU layer, additive energies (with a coverage model that declares a fused
        cell, if any), no active dropout, CPU. With `refeed`, scheduled sampling."""
        energy = self.attention.fused_energy_weights(coverage=True)
        coverage = coverage_inputs(self.attention, state["attention"])
        if (
            energy is None
            or coverage is None
            or self.is_lstm
            or self.num_layers != 1
            or (self.training and self.dropout.p > 0)
            or not runs_fused(self.embedding.weight)
        ):
            return None
        w_q, b_q, v = energy
        H, E = self.hidden_size, self.embedding.embedding_dim
        w_ih, w_c = self.rnn.weight_ih_l0, self.combine.weight
        D = w_c.size(1) - H  # combine reads [c; s']
        w_x, b_x = w_ih[:, :E], self.rnn.bias_ih_l0
        return LuongGRURecurrence.apply(
            F.linear(self.embedding(tgt_in), w_x, b_x),
            state["hidden"][:, 0],
            state["feed"],
            memory.keys,
            memory.values,
            memory.mask,
            torch.cat([w_q, w_c[:, D:], self.rnn.weight_hh_l0]),
            torch.cat([b_q, b_q.new_zeros(H), self.rnn.bias_hh_l0]),
            w_ih[:, E:],
            w_c[:, :D],
            v,
            *refeed_inputs(refeed, self.embedding.weight, w_x, b_x),
            *coverage,
        )

    def paper_init_(self) -> None:
        if self.attention is not None:
            self.attention.paper_init_()


class Luong(Seq2Seq):
    """Luong et al. 2015's family: stacked LSTM (or GRU) encoder and decoder, an attention
    variant (`model/attention`: dot, general, concat, location, local_m, local_p;
    `~model/attention` for none), optional input feeding and source reversal. A bidirectional
    encoder has hidden_size / 2 units per direction, so annotations match the decoder size.
    `copy` (model/copy=pointer_generator) wraps the decoder in a pointer-generator.
    Paper: 4 layers of 1000 LSTM units, embeddings 1000, dropout 0.2, uniform init in
    [-0.1, 0.1] (`init: uniform`)."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embedding_dim: int = 1000,
        hidden_size: int = 1000,
        num_layers: int = 4,
        rnn_type: str = "lstm",
        bidirectional_encoder: bool = False,
        reverse_source: bool = False,
        input_feeding: bool = True,
        attention: Callable[..., Attention] | None = None,
        coverage: Callable[..., Coverage] | None = None,
        dropout: float = 0.0,
        init: str = "default",
        copy: Callable[..., Decoder] | None = None,
    ):
        encoder_hidden = hidden_size // 2 if bidirectional_encoder else hidden_size
        encoder = RNNEncoder(
            src_vocab_size,
            embedding_dim,
            encoder_hidden,
            num_layers=num_layers,
            bidirectional=bidirectional_encoder,
            rnn_type=rnn_type,
            dropout=dropout,
            reverse_source=reverse_source,
        )
        if attention is not None:
            attention = with_coverage(
                attention(query_size=hidden_size, key_size=encoder.output_size), coverage
            )
        decoder = LuongDecoder(
            tgt_vocab_size,
            embedding_dim,
            hidden_size,
            num_layers,
            rnn_type,
            encoder,
            attention,
            input_feeding=input_feeding,
            dropout=dropout,
        )
        if copy is not None:  # the pointer-generator's switch reads h~_t
            decoder = copy(decoder=decoder, feature_size=hidden_size, vocab_size=tgt_vocab_size)
        super().__init__(encoder, decoder)
        initialise(self, init)
