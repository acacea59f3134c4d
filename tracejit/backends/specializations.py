"""Every specialization kept by the exported backends: one model per specialization, chosen per call.

A traced program that retraced (a second image size took another branch: ``x.shape[-1] > 32``) holds
several specializations of ``forward``, each with its guards. onnxruntime and OpenVINO get one exported
model per specialization (backends/onnx_call.py ``prepare``); ``SpecializationChoice`` picks, per call,
the first specialization whose guards hold, as the traced program does, and calls its model.

An exported specialization's guards read sizes, dtypes and ranks only (a guard on tensor values makes
the export fail), so the choice depends only on the call's tensor shapes, dtypes and devices and its
non-tensor arguments: it is made once per such key by running the prepared torch program's guards (the
whole program, on copies of the inputs, under no_grad with private randomness and buffers put back:
nothing the caller sees changes) and remembered (``CACHE`` keys, then forgotten and made again). A call
no specialization fits goes to the live traced object the program was exported from, which traces its
original again (eager's answer; backends/fallback.py ``hand_over``); without one (a loaded program, a
dropped original) it raises the GuardError that lists what each one required: never the answer of a branch
the trace did not take.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import GuardError
from ..pytree import flatten
from ..runtime import specialize
from ..runtime.private_rng import PrivateRandomness
from ..runtime.state import ModuleState
from ..runtime.undo import inputs_for_retrace
from .fallback import hand_over, may_answer

CACHE = 256   # remembered choices (keys of shapes / dtypes); when full, forgotten all at once
LIVE = -1     # the remembered choice of a call no specialization fits: the live traced object answers


def call_key(args, kwargs):
    """What a choice depends on: each tensor's shape, dtype and device, each other argument's value
    (None when one is unhashable: the choice is then made for that call alone)."""
    leaves, _ = flatten((args, kwargs))
    key = [len(args), tuple(kwargs)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append((tuple(leaf.shape), leaf.dtype, leaf.device))
        else:
            try:
                hash(leaf)
            except TypeError:
                return None
            key.append((type(leaf), leaf))
    return tuple(key)


class SpecializationChoice:
    """``calls[i]`` runs the model of specialization ``i`` of ``prepared``'s ``forward`` (the first trace,
    then the others oldest first); calling the choice runs the one whose guards hold for the call."""

    def __init__(self, prepared, calls: list, safe=None):
        self.prepared = prepared
        self.safe = safe   # the traced object the program was exported from (``hand_over``)
        self.spec_set = specialize.sets_of(prepared)["forward"]
        self.specs = [self.spec_set.first, *self.spec_set.extra()]
        if len(self.specs) != len(calls):
            raise ValueError(f"{len(calls)} exported models for {len(self.specs)} specializations")
        self.calls = list(calls)
        self.chosen: dict = {}

    def __call__(self, *args, **kwargs):
        key = call_key(args, kwargs)
        index = self.chosen.get(key) if key is not None else None
        if index == LIVE and may_answer(self.safe):   # an exported program is an eval program
            return self.safe(*args, **kwargs)
        if index is None or index == LIVE:
            try:
                index = self.choose(args, kwargs)
            except GuardError as e:
                index = LIVE
                answer = hand_over(self.safe, e, args, kwargs)
            if key is not None:
                if len(self.chosen) >= CACHE:
                    self.chosen = {}
                self.chosen[key] = index
            if index == LIVE:
                return answer
        return self.calls[index](*args, **kwargs)

    def choose(self, args, kwargs) -> int:
        """The index of the first specialization whose guards hold for this call."""
        failures = []
        state = ModuleState(self.prepared if isinstance(self.prepared, nn.Module) else None)
        try:
            with torch.no_grad(), PrivateRandomness():
                for index, spec in enumerate(self.specs):
                    try:
                        self.spec_set.run(spec, *inputs_for_retrace(args, kwargs))
                    except GuardError as e:
                        if e.guard is None:
                            raise
                        failures.append((spec, e))
                        continue
                    return index
        finally:
            state.restore()
        raise specialize.none_fits(self.prepared, "forward", failures)


def choose_per_call(program, prepared, others: list) -> None:
    """Give ``program`` (the first specialization's) every other specialization's program (``others``,
    oldest first): its calls then go to the one whose guards hold. ``program.specializations`` lists
    them all, the first trace first."""
    program.specializations = (program, *others)
    if others:
        program._call = SpecializationChoice(prepared, [program._call, *(other._call for other in others)],
                                             getattr(program, "_safe", None))
