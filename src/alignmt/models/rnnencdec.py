"""RNNencdec (Cho et al. 2014): encoder-decoder without attention, the paper's baseline."""

from __future__ import annotations

import torch
from torch import nn

from alignmt.models.encoder import EncoderOutput, RNNEncoder
from alignmt.models.init import initialise
from alignmt.models.readout import MaxoutReadout
from alignmt.models.seq2seq import Decoder, DecoderOutput, DecoderState, Memory, Seq2Seq
from alignmt.special_tokens import PAD_ID


class RNNEncDecDecoder(Decoder):
    """Every step sees the same fixed-length summary c = tanh(V h_T) of the source:

        s_0 = tanh(V' c),   s_t = GRU(s_{t-1}, [E y_{t-1}; c]),
        p(y_t) = softmax(W_o maxout(O_h s_t + O_y E y_{t-1} + O_c c))

    (Cho et al. 2014, eqs. in their appendix A). h_T is the encoder's final state of each
    direction. With c constant, teacher forcing runs the GRU over the whole target in one call.
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
        self.rnn = nn.GRU(embedding_dim + context_size, hidden_size, batch_first=True)
        self.readout = MaxoutReadout(
            hidden_size + embedding_dim + context_size, maxout_size, vocab_size, dropout=dropout
        )

    def start(self, encoded: EncoderOutput) -> tuple[Memory, DecoderState]:
        summary = torch.tanh(self.summary_proj(encoded.final))
        memory = Memory(summary.unsqueeze(1), None, encoded.mask[:, :1])
        return memory, {"hidden": torch.tanh(self.init_proj(summary))}

    def forward(self, tgt_in: torch.Tensor, memory: Memory, state: DecoderState) -> DecoderOutput:
        embedded = self.embedding(tgt_in)
        summary = memory.values.expand(-1, tgt_in.size(1), -1)
        hiddens, _ = self.rnn(
            torch.cat([embedded, summary], dim=-1), state["hidden"].unsqueeze(0).contiguous()
        )
        return DecoderOutput(self.readout(hiddens, embedded, summary), None)

    def step(self, prev_tokens, memory, state):
        embedded = self.embedding(prev_tokens)
        summary = memory.values[:, 0]
        _, hidden = self.rnn(
            torch.cat([embedded, summary], dim=-1).unsqueeze(1),
            state["hidden"].unsqueeze(0).contiguous(),
        )
        hidden = hidden.squeeze(0)
        return self.readout(hidden, embedded, summary), {"hidden": hidden}, None


class RNNEncDec(Seq2Seq):
    """Bidirectional GRU encoder (the same as RNNsearch's) + the attention-free decoder."""

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
        encoder = RNNEncoder(src_vocab_size, embedding_dim, encoder_hidden_size, bidirectional=True)
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
