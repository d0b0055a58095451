from alignmt.models.encoder import EncoderOutput, RNNEncoder
from alignmt.models.luong import Luong, LuongDecoder
from alignmt.models.rnnencdec import RNNEncDec
from alignmt.models.rnnsearch import RNNSearch
from alignmt.models.seq2seq import Decoder, DecoderOutput, DecoderState, Memory, Seq2Seq

__all__ = [
    "Decoder",
    "DecoderOutput",
    "DecoderState",
    "EncoderOutput",
    "Luong",
    "LuongDecoder",
    "Memory",
    "RNNEncDec",
    "RNNEncoder",
    "RNNSearch",
    "Seq2Seq",
]
