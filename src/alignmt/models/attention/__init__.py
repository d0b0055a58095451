from alignmt.models.attention.additive import AdditiveAttention, ConcatAttention
from alignmt.models.attention.base import Attention, AttentionState, masked_softmax
from alignmt.models.attention.hard import HardAttention
from alignmt.models.attention.local import (
    LocalAttention,
    LocalMonotonicAttention,
    LocalPredictiveAttention,
)
from alignmt.models.attention.location import LocationAttention
from alignmt.models.attention.multiplicative import DotAttention, GeneralAttention

__all__ = [
    "AdditiveAttention",
    "Attention",
    "AttentionState",
    "ConcatAttention",
    "DotAttention",
    "GeneralAttention",
    "HardAttention",
    "LocalAttention",
    "LocalMonotonicAttention",
    "LocalPredictiveAttention",
    "LocationAttention",
    "masked_softmax",
]
