from alignmt.decoding.greedy import GreedySearch
from alignmt.decoding.hypothesis import Hypothesis

__all__ = ["GreedySearch", "Hypothesis"]
