"""A differentiable function replayed as two captured CUDA graphs, its forward and backward pass.

Capturing runs the function's own kernels once, into a graph; a replay launches them all at
once, so a function made of many small kernels (a recurrence unrolled over time) costs two
launches instead of thousands. The captured function must see static shapes and run no host
synchronisation; its inputs are copied into static buffers before each replay, and its
outputs and gradients are copied out, so nothing a caller keeps is overwritten later.

All captures of one `CapturedGraphs` share a memory pool: what one graph needs between its
forward and its backward replay may lie where another graph works. One forward replay's
backward must therefore run before the next forward replay of any of them, as in a training
step; a backward pass out of that order is refused.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

import torch
from torch.autograd.function import once_differentiable


def uncached_autocast() -> torch.autocast:
    """The current CUDA autocast setting without its cache of cast weights: a cached weight is
    cast outside the graph and freed after the step, so a graph must cast its own."""
    return torch.autocast(
        "cuda",
        dtype=torch.get_autocast_dtype("cuda"),
        enabled=torch.is_autocast_enabled("cuda"),
        cache_enabled=False,
    )


def _differentiable_grads(
    outputs: Sequence[torch.Tensor],
    grad_outputs: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
) -> tuple[torch.Tensor | None, ...]:
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs, strict=True) if o.requires_grad]
    return torch.autograd.grad(
        [o for o, _ in pairs], list(inputs), [g for _, g in pairs], allow_unused=True
    )


class CaptureFailed(RuntimeError):
    """A function could not be captured (it synchronises with the host, say)."""


class CapturedFunction:
    """`fn(*inputs) -> tuple of tensors`, captured at the shapes, dtypes and requires_grad flags
    of `example`, differentiated with respect to the inputs that require grad and `params`."""

    def __init__(
        self,
        fn: Callable[..., tuple[torch.Tensor, ...]],
        example: Sequence[torch.Tensor],
        params: Sequence[torch.Tensor],
        pool,
        warmup: int = 2,
    ):
        self.params = list(params)
        self.inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in example]
        wrt = [x for x in self.inputs if x.requires_grad] + self.params
        with uncached_autocast():
            # Warm-up on a side stream: compilation, cuDNN and cuBLAS set-up stay out of the
            # capture.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    outputs = fn(*self.inputs)
                    _differentiable_grads(outputs, [torch.ones_like(o) for o in outputs], wrt)
            torch.cuda.current_stream().wait_stream(side)
            self.forward_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.forward_graph, pool=pool, capture_error_mode="thread_local"):
                outputs = fn(*self.inputs)
            self.grad_outputs = [torch.zeros_like(o) for o in outputs]
            self.backward_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(
                self.backward_graph, pool=pool, capture_error_mode="thread_local"
            ):
                grads = _differentiable_grads(outputs, self.grad_outputs, wrt)
        self.outputs = [o.detach() for o in outputs]
        grads = iter(grads)
        self.input_grads = [next(grads) if x.requires_grad else None for x in self.inputs]
        self.param_grads = list(grads)

    def forward(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        for static, x in zip(self.inputs, inputs, strict=True):
            static.copy_(x)
        self.forward_graph.replay()
        return tuple(o.clone() for o in self.outputs)

    def backward(self, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        for static, grad in zip(self.grad_outputs, grads, strict=True):
            if grad is None:
                static.zero_()
            else:
                static.copy_(grad)
        self.backward_graph.replay()
        # Copies: autograd may keep a returned tensor as a parameter's .grad, and the next
        # replay would overwrite it.
        return [None if g is None else g.clone() for g in self.input_grads + self.param_grads]


class _Replay(torch.autograd.Function):
    @staticmethod
    def forward(ctx, graphs: CapturedGraphs, captured: CapturedFunction, *tensors):
        graphs.generation += 1
        ctx.graphs, ctx.captured, ctx.generation = graphs, captured, graphs.generation
        return captured.forward(tensors[: len(captured.inputs)])

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        if ctx.generation != ctx.graphs.generation:
            raise RuntimeError(
                "a captured decoder graph was replayed again before this backward pass: with "
                "fast_path.cuda_graphs, run each forward pass's backward before the next forward"
            )
        return None, None, *ctx.captured.backward(grads)


class CapturedGraphs:
    """Captured functions by key, sharing one memory pool; beyond `capacity` the least
    recently used is dropped (its memory goes back to the pool)."""

    def __init__(self, capacity: int = 64):
        if capacity < 1:
            raise ValueError(f"fast_path.max_graphs must be at least 1, got {capacity}")
        self.capacity = capacity
        self.functions: OrderedDict[Hashable, CapturedFunction] = OrderedDict()
        self.generation = 0  # forward replays so far
        self.captures = 0
        self._pool = None

    def __call__(
        self,
        key: Hashable,
        fn: Callable[..., tuple[torch.Tensor, ...]],
        inputs: Sequence[torch.Tensor],
        params: Sequence[torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        """fn(*inputs), by the graphs captured for `key` (captured now if there are none;
        `CaptureFailed` if they cannot be)."""
        captured = self.functions.get(key)
        if captured is None:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            try:
                captured = CapturedFunction(fn, inputs, params, self._pool)
            except RuntimeError as error:
                raise CaptureFailed(str(error)) from error
            self.functions[key] = captured
            self.captures += 1
            while len(self.functions) > self.capacity:
                self.functions.popitem(last=False)
        self.functions.move_to_end(key)
        return _Replay.apply(self, captured, *inputs, *captured.params)
