"""When a parameter last changed, for what is made from it once and kept (decoding's low
precision copies, search steps' packed weights): its version counter moves at every in-place
update, but fused optimisers (Adam's `fused=True`, the default here) update in place without
moving it, so the optimiser steps that updated a parameter are counted on it as well."""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

STEPS = "_alignmt_optimizer_steps"  # a parameter's attribute: the optimiser steps that updated it


def _count_optimizer_step(optimizer, args, kwargs) -> None:
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            setattr(parameter, STEPS, getattr(parameter, STEPS, 0) + 1)


register_optimizer_step_post_hook(_count_optimizer_step)


def version(tensor: torch.Tensor) -> tuple:
    """Changes whenever `tensor` is updated in place (an optimiser step included) or its data
    moves (a replaced or reloaded parameter)."""
    return (id(tensor), tensor.data_ptr(), tensor._version, getattr(tensor, STEPS, 0))
