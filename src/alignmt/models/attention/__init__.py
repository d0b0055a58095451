from alignmt.models.attention.additive import AdditiveAttention
from alignmt.models.attention.base import Attention, AttentionState, masked_softmax

__all__ = ["AdditiveAttention", "Attention", "AttentionState", "masked_softmax"]
