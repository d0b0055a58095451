"""RNNencdec: the RNN encoder-decoder of Cho et al. 2014, Bahdanau et al.'s baseline."""

from __future__ import annotations

import torch
from torch import nn

from alignmt.models.encoder import EncoderOutput, RNNEncoder
from alignmt.models.functional import gru_update
from alignmt.models.init import initialise, orthogonal_blocks_
from alignmt.models.readout import MaxoutReadout
from alignmt.models.seq2seq import Decoder, DecoderState, Memory, Seq2Seq
from alignmt.special_tokens import PAD_ID


class RNNEncDecDecoder(Decoder):
    """Cho et al. 2014, appendix A.1: every step sees the same summary c of the source,

        c    = tanh(V h_N)                          h_N: the encoder's last hidden state
        h'_0 = tanh(V' c)
        z, r = sigmoid(W_{z,r} e(y_{t-1}) + U_{z,r} h'_{t-1} + C_{z,r} c)
        h~   = tanh(W e(y_{t-1}) + r * (U h'_{t-1} + C c))
        h'_t = z h'_{t-1} + (1 - z) h~
        p(y_t) = softmax(G maxout(O_h h'_t + O_y e(y_{t-1}) + O_c c))

    c enters the candidate state inside the reset gate, the initial state and the output layer.
    C c is the same at every step, so it is computed once per sentence (held as the memory's
    keys); the recurrence itself runs step by step.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int,
        hidden_size: int,
        context_size: int,
        maxout_size: int,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PAD_ID)
        self.summary_proj = nn.Linear(context_size, context_size)  # V
        self.init_proj = nn.Linear(context_size, hidden_size)  # V'
        self.embedding_proj = nn.Linear(embedding_dim, 3 * hidden_size)  # W, W_z, W_r (+ biases)
        self.recurrent_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=False)  # U, U_z, U_r
        self.context_proj = nn.Linear(context_size, 3 * hidden_size, bias=False)  # C, C_z, C_r
        self.maxout = MaxoutReadout(
            hidden_size + embedding_dim + context_size, maxout_size, vocab_size, dropout=dropout
        )

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        summary = torch.tanh(self.summary_proj(encoded.final))  # c
        memory = Memory(
            summary.unsqueeze(1), self.context_proj(summary).unsqueeze(1), encoded.mask[:, :1]
        )
        return memory, {"hidden": torch.tanh(self.init_proj(summary))}

    def step(self, prev_tokens, memory, state):
        embedded = self.embedding(prev_tokens)
        gates_h = self.recurrent_proj(state["hidden"]) + memory.keys[:, 0]
        hidden = gru_update(state["hidden"], self.embedding_proj(embedded), gates_h)
        features = torch.cat([hidden, embedded, memory.values[:, 0]], dim=-1)
        return features, {"hidden": hidden}, None

    def readout(self, features):
        return self.maxout(features)

    def split_readout(self):
        return self.maxout.hidden, self.maxout.output

    def paper_init_(self) -> None:
        orthogonal_blocks_(self.recurrent_proj.weight)


class RNNEncDec(Seq2Seq):
    """A unidirectional GRU encoder and the decoder above, as in Cho et al. 2014 and
    Bahdanau et al.'s RNNencdec baseline (1000 units each, embeddings 620, maxout 500)."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embedding_dim: int = 620,
        encoder_hidden_size: int = 1000,
        decoder_hidden_size: int = 1000,
        maxout_size: int = 500,
        dropout: float = 0.0,
        init: str = "default",
    ):
        encoder = RNNEncoder(
            src_vocab_size, embedding_dim, encoder_hidden_size, bidirectional=False
        )
        decoder = RNNEncDecDecoder(
            tgt_vocab_size,
            embedding_dim,
            decoder_hidden_size,
            encoder.output_size,
            maxout_size,
            dropout=dropout,
        )
        super().__init__(encoder, decoder)
        initialise(self, init)
