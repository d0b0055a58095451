import gc

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from alignmt.plots import plot_attention, plot_bleu_by_length

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    assert path.is_file()
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 1000


@pytest.mark.parametrize("n", [3, 80])
def test_plot_attention_writes_png(tmp_path, n):
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(n), size=n + 1)
    source = [f"src{i}" for i in range(n)]
    target = [f"tgt{j}" for j in range(n + 1)]
    path = plot_attention(weights, source, target, tmp_path / "plots" / "att.png", title="$x$ 1")
    assert path == tmp_path / "plots" / "att.png"
    assert_png(path)
    assert plt.get_fignums() == []


def test_plot_attention_shape_mismatch(tmp_path):
    with pytest.raises(ValueError, match="2 target and 3 source"):
        plot_attention(np.ones((3, 2)), ["a", "b", "c"], ["x", "y"], tmp_path / "a.png")


def test_plot_bleu_by_length_writes_png(tmp_path):
    rows = [
        {"bucket": "1-10", "lo": 1, "hi": 10, "sentences": 4, "bleu": 21.0},
        {"bucket": "11-20", "lo": 11, "hi": 20, "sentences": 0, "bleu": None},
        {"bucket": "51+", "lo": 51, "hi": None, "sentences": 2, "bleu": 9.5},
    ]
    curves = {"RNNsearch-50": rows, "RNNencdec-50": [dict(r, bleu=5.0) for r in rows]}
    path = plot_bleu_by_length(curves, tmp_path / "bleu.png", title="BLEU by length")
    assert_png(path)
    assert plt.get_fignums() == []


def live_figures():
    gc.collect()
    return sum(isinstance(obj, Figure) for obj in gc.get_objects())


def test_many_plots_leave_no_figures(tmp_path):
    before = live_figures()
    for k in range(20):
        plot_attention(np.eye(4), list("abcd"), list("wxyz"), tmp_path / f"{k}.png")
    assert live_figures() == before
    assert plt.get_fignums() == []
