"""Parameter initialisation schemes selectable from config (`model.init`)."""

from __future__ import annotations

import torch
from torch import nn

SCHEMES = ("default", "paper", "uniform")


def initialise(model: nn.Module, scheme: str) -> None:
    """`default` keeps PyTorch's initialisation; `paper` is Bahdanau et al. 2014's; `uniform`
    draws every parameter from U(-0.1, 0.1), as Luong et al. 2015 (and Sutskever et al.) do."""
    if scheme not in SCHEMES:
        raise ValueError(f"model.init must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "paper":
        paper_init(model)
    elif scheme == "uniform":
        with torch.no_grad():
            for param in model.parameters():
                param.uniform_(-0.1, 0.1)


@torch.no_grad()
def paper_init(model: nn.Module) -> None:
    """Appendix B.1 of Bahdanau et al. 2014: recurrent matrices random orthogonal; W_a and U_a
    from N(0, 0.001^2); v_a and all biases zero; every other weight from N(0, 0.01^2).

    The generic rules apply to torch's layers; the modules whose parameters play the special
    roles (attention, hand-written recurrences) apply theirs in their `paper_init_` hook.
    """
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, 0.01)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.RNNBase):
            for name, param in module.named_parameters():
                if name.startswith("weight_hh"):
                    orthogonal_blocks_(param)
                elif name.startswith("weight"):
                    nn.init.normal_(param, 0.0, 0.01)
                else:
                    nn.init.zeros_(param)
    model.paper_init_()


@torch.no_grad()
def orthogonal_blocks_(weight: torch.Tensor) -> None:
    """Each square gate block of a stacked [k*H, H] recurrent matrix: its own orthogonal init."""
    hidden = weight.size(1)
    for block in weight.split(hidden, dim=0):
        nn.init.orthogonal_(block)
