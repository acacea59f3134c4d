"""Default-deny, checked against eager on PyTorch's own sample inputs: every allowed op that PyTorch's
OpInfo samples reach either has a size rule (its own, or the one derived for ops of several tensors)
that counts at least what eager made, or makes no more elements than its largest tensor input
(what its family of op_allowlist.py claims). OpInfo (torch.testing._internal, which needs
``expecttest``) gives each op inputs of many shapes, ranks and arguments written by the people who
know the op; a TorchDispatchMode sees every ATen op they run, also inside composite ones."""
from __future__ import annotations

import functools
import itertools
import random
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tracejit.serialize import op_allowlist, size_rules

SAMPLES_PER_OP = 6


def _numels(x) -> list[int]:
    out = []
    for t in (x if isinstance(x, (list, tuple)) else [x]):
        if isinstance(t, torch.Tensor):
            out.append(t.numel())
        elif isinstance(t, (list, tuple)):
            out += _numels(t)
    return out


class _Audit(TorchDispatchMode):
    """Runs each op, then holds its outputs to its size rule or to its largest tensor input."""

    def __init__(self):
        super().__init__()
        self.seen, self.problems = set(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name.split("::")[1]
        if name not in op_allowlist.ALLOWED:
            return out
        self.seen.add(name)
        bound = {a.name: v for a, v in zip(func._schema.arguments, args)} | kwargs
        made = max(_numels(out), default=0)
        rule = size_rules.rule_for(name, bound)
        if rule is not None:
            counted = rule.elements(bound)
            if counted is not None and made > counted:
                self.problems.setdefault(name, f"made {made} elements, its rule counted {counted}")
        else:
            largest = max(_numels(list(bound.values())), default=0)
            if made > max(largest, 1):
                self.problems.setdefault(name, f"made {made} elements from at most {largest} (no rule)")
        return out


def _seed_cpu(common_utils, seed=None):
    """PyTorch's ``common_utils.set_rng_seed`` for CPU samples: the generators they draw from, without the
    per-accelerator queues of ``torch.manual_seed``."""
    seed = common_utils.SEED if seed is None else seed
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    if common_utils.TEST_NUMPY:
        import numpy
        numpy.random.seed(seed)


def test_allowed_ops_make_no_more_than_their_rule_or_their_largest_input(monkeypatch):
    common = pytest.importorskip("torch.testing._internal.common_methods_invocations",
                                 reason="OpInfo needs expecttest (pyproject.toml's test extras)")
    # every sample generator asks for the running unittest method through inspect.stack() (a debugging
    # aid of PyTorch's own test classes; none here): 46 of this test's 51 s. PyTorch asks in two places:
    # common_utils' sample iterator and opinfo/core.py's sample callback, which imported the function by
    # name (patching only common_utils left it walking the stack: with both and the seeding below, 24-26 s -> 7 s)
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core as opinfo_core
    monkeypatch.setattr(common_utils, "extract_test_fn", lambda: None)
    monkeypatch.setattr(opinfo_core, "extract_test_fn", lambda: None)
    # each sample is seeded with torch.manual_seed, which also queues the seed for CUDA, XPU and MTIA with a
    # formatted stack each time (traceback.format_stack) while they are uninitialised: seed only what the
    # samples draw from (CPU samples: torch's CPU generator, random, numpy), the same values
    monkeypatch.setattr(common_utils, "set_rng_seed", functools.partial(_seed_cpu, common_utils))
    audit = _Audit()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in common.op_db:
            try:
                samples = list(itertools.islice(info.sample_inputs("cpu", torch.float32, requires_grad=False),
                                                 SAMPLES_PER_OP))   # the first few: a generator may make hundreds
            except Exception:   # noqa: BLE001 - a sample generator this build cannot run
                continue
            for s in samples:
                try:
                    with audit:
                        info.op(s.input, *s.args, **s.kwargs)
                except Exception:   # noqa: BLE001 - samples meant to raise (error inputs, dtypes)
                    pass
    assert len(audit.seen) >= 250, len(audit.seen)   # most of the allow-list is reached
    assert not audit.problems, audit.problems
