from alignmt.decoding.beam import BeamSearch
from alignmt.decoding.greedy import GreedySearch
from alignmt.decoding.hypothesis import Hypothesis

__all__ = ["BeamSearch", "GreedySearch", "Hypothesis"]
