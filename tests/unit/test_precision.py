"""Decoding precision: float32 is the searches' exact default, bfloat16 an explicit option."""

import pytest
import torch

from alignmt.decoding import BeamSearch, GreedySearch
from alignmt.models import Luong, RNNSearch
from alignmt.models.attention import AdditiveAttention
from alignmt.special_tokens import EOS_ID

MODELS = {
    "rnnsearch": lambda: RNNSearch(40, 30, 8, 6, 10, 4),
    "luong": lambda: Luong(40, 30, 8, 10, 1, rnn_type="gru", attention=AdditiveAttention),
}


def sources():
    lengths = torch.tensor([6, 3, 5])
    src = torch.randint(4, 40, (3, 6))
    src[torch.arange(6) >= lengths[:, None]] = 0
    src[torch.arange(3), lengths - 1] = EOS_ID
    return src, lengths


@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_an_unknown_precision_is_refused(search):
    with pytest.raises(ValueError, match="precision must be one of"):
        search(precision="float16")


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("search", [GreedySearch, BeamSearch])
def test_bfloat16_decodes_float32_scores_and_attention_at_the_lengths_asked(name, search):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    src, lengths = sources()
    out = search(max_length=4, min_length=4, precision="bfloat16")(model, src, lengths)
    for nbest, length in zip(out, lengths.tolist(), strict=True):
        best = nbest[0]
        assert len(best.tokens) == 4
        assert best.attention.dtype == torch.float32 and best.attention.shape == (5, length)
        # still weights, summing to 1 to bfloat16 precision (8 bits of mantissa)
        torch.testing.assert_close(best.attention.sum(1), torch.ones(5), atol=2**-7, rtol=0)
        assert isinstance(best.score, float) and best.score < 0


def test_float32_is_the_default_and_the_same_search():
    torch.manual_seed(0)
    model = MODELS["luong"]().eval()
    src, lengths = sources()
    default = BeamSearch(beam_size=3)(model, src, lengths)
    explicit = BeamSearch(beam_size=3, precision="float32")(model, src, lengths)
    assert [[(h.tokens, h.score) for h in n] for n in default] == [
        [(h.tokens, h.score) for h in n] for n in explicit
    ]
