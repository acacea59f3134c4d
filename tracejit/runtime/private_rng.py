"""Random draws of the checker's runs, taken from private generators instead of the global one.

The checker runs the user's function, the traced program and a retrace on the same inputs.
Rewinding torch's global generator between them (``torch.set_rng_state``, or ``fork_rng``, which
does the same) would be seen by every other thread: their next draws would repeat. Instead,
while ``PrivateRandomness`` is active (a TorchFunctionMode, so only in the thread that entered
it), every random op that takes a ``generator`` argument draws from a private generator that
starts from a copy of the global generator's state, and the dropout family (which takes no
generator) is computed from a Bernoulli mask drawn the same way. The global generator is only
read, never advanced or set; ``rewind()`` puts the private generators back at their start, so
every run of a check sees the same random stream: the eager-vs-traced comparison is
deterministic, and nothing another thread draws can change it.

The mode costs a Python call per op, so ``for_graph`` gives it only to checks of a trace that
holds a random op; other traces draw nothing from any generator. Random draws that happen inside
one C++ op and take no generator (dropout inside ``scaled_dot_product_attention``) still use the
global generator.
"""
from __future__ import annotations

import types

import torch
from torch.overrides import TorchFunctionMode

from .. import ops as op_facts
from ..compat import redispatch_function

_SELU_ALPHA = 1.7580993408473766   # ATen's alpha dropout constant


class _NoDraws:
    """Stands for PrivateRandomness where the traced code draws no random numbers."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def rewind(self) -> None:
        return None


def for_graph(graph) -> "PrivateRandomness | _NoDraws":
    """A PrivateRandomness if one of ``graph``'s nodes (a flat graph) draws random numbers, else a stand-in
    that does nothing."""
    for node in graph.nodes:
        if node.attrs.get("nondeterministic") or op_facts.takes_generator(op_facts.base_name(node.op)):
            return PrivateRandomness()   # (dropout in eval mode is recorded, but not flagged: it draws nothing)
    return _NoDraws()


class PrivateRandomness(TorchFunctionMode):
    """Inside ``with PrivateRandomness():`` this thread's random ops draw from private generators."""

    def __init__(self):
        super().__init__()
        self._generators: dict[torch.device, tuple[torch.Generator, torch.Tensor]] = {}
        self._python_calls: list = []

    def rewind(self) -> None:
        """Every private generator back to the state it started from."""
        for generator, start in self._generators.values():
            generator.set_state(start)

    def generator(self, device: torch.device) -> torch.Generator | None:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._generators:
            if device.type == "cpu":
                source = torch.default_generator
            elif device.type == "cuda":
                source = torch.cuda.default_generators[device.index]
            else:
                return None   # other devices keep their own generators
            start = source.get_state()   # a read: the global generator does not move
            generator = torch.Generator(device=device)
            generator.set_state(start)
            self._generators[device] = (generator, start)
        return self._generators[device][0]

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if not _is_builtin(func):
            if func in self._python_calls:
                return func(*args, **kwargs)
            self._python_calls.append(func)
            try:
                with self:   # stay active inside Python helpers (F.dropout calls _VF.dropout)
                    return redispatch_function(func, types_, args, kwargs)
            finally:
                self._python_calls.pop()
        if op_facts.takes_generator(name) and kwargs.get("generator") in (None, torch.default_generator) \
                and not any(isinstance(a, torch.Generator) for a in args):
            generator = self.generator(_device_of(args, kwargs))
            if generator is not None:
                kwargs = {**kwargs, "generator": generator}
        elif op_facts.is_dropout(name) and name != "native_dropout" and len(args) + len(kwargs) == 3:
            return self._dropout(func, name, args, kwargs)
        elif name == "native_dropout" and len(args) + len(kwargs) == 3:
            return self._native_dropout(func, args, kwargs)
        return func(*args, **kwargs)

    def _dropout(self, func, name, args, kwargs):
        x, p, train = _dropout_args(args, kwargs)
        generator = self.generator(x.device) if isinstance(x, torch.Tensor) else None
        if not train or p == 0 or generator is None or x.numel() == 0:
            return func(*args, **kwargs)
        inplace = name.endswith("_")
        if p == 1:
            zero = torch.zeros((), dtype=x.dtype, device=x.device)
            return x.mul_(zero) if inplace else x * zero
        shape = (x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2) if "feature" in name else x.shape
        noise = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(1 - p, generator=generator)
        if "alpha" in name:
            a = 1.0 / ((_SELU_ALPHA ** 2 * p + 1) * (1 - p)) ** 0.5
            shift = noise.add(-1).mul_(_SELU_ALPHA * a).add_(_SELU_ALPHA * a * p)
            noise.mul_(a)
            return x.mul_(noise).add_(shift) if inplace else (x * noise).add_(shift)
        noise.div_(1 - p)
        return x.mul_(noise) if inplace else x * noise

    def _native_dropout(self, func, args, kwargs):
        x, p, train = _dropout_args(args, kwargs)
        generator = self.generator(x.device) if isinstance(x, torch.Tensor) else None
        if train is False or generator is None:
            return func(*args, **kwargs)
        mask = torch.empty(x.shape, dtype=x.dtype, device=x.device).bernoulli_(1 - p, generator=generator).bool()
        scale = 0.0 if p == 1 else 1.0 / (1 - p)
        return x * mask * scale, mask


def _dropout_args(args, kwargs):
    names = ("input", "p", "train")
    values = list(args) + [kwargs.get(n) for n in names[len(args):]]
    return values[0], float(values[1]), values[2]


def _device_of(args, kwargs) -> torch.device:
    if kwargs.get("device") is not None:
        return torch.device(kwargs["device"])
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device
    return torch.get_default_device()


def _is_builtin(func) -> bool:
    return isinstance(func, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
                             types.MethodWrapperType, types.BuiltinMethodType))
