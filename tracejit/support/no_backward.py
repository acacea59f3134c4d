"""A loaded program's stand-in for a custom autograd Function: its forward's results, no backward.

Files hold no code, so the Function's backward is not in a saved program. The
recorded forward ops run; their results pass through ``_NoBackward``, tied to
the Function's inputs, whose backward raises instead of letting autograd use
the derivatives of those ops (a silently different gradient).
"""
from __future__ import annotations

import torch


class _NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, message, n_inputs, *tensors):
        ctx.message = message
        return tuple(t.clone() for t in tensors[n_inputs:])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(ctx.message)


def call_without_backward(name: str, where: str, inputs: tuple, outputs: tuple, layout):
    """Return ``outputs``: one tensor when ``layout`` is None, else a tuple with None where ``layout`` is False.

    A gradient through them raises RuntimeError."""
    tensors = [a for a in _tensors(inputs)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        message = (f"the custom autograd Function {name} (called at {where}) was loaded from a file, which holds "
                   "its forward's ops but not its backward, so no gradient can flow through it. Use the traced "
                   "program in memory (it calls the Function itself), or detach the Function's inputs.")
        outputs = _NoBackward.apply(message, len(tensors), *tensors, *outputs)
    if layout is None:
        return outputs[0]
    it = iter(outputs)
    return tuple(next(it) if is_tensor else None for is_tensor in layout)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
