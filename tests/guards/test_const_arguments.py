"""Arguments traced as constants that are not bool / int / float / str / None (hunt21), and closure variables.

A ``torch.dtype``, a device, an enum member, a function, complex or bytes, a config object (SimpleNamespace,
dataclass) passed as an argument: the generated code never looked at them, so a call with another one answered
with the traced one silently (torch.jit.trace refuses such inputs at trace time). Now such a call raises ArgumentValueError naming
the argument, as for a changed int (support/const_args.py). The same value (or an equal one) still runs.
"""
from __future__ import annotations

import dataclasses
import enum
import types
import warnings

import pytest
import torch

import tracejit


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


class Mode(enum.Enum):
    A = 1
    B = 2


@dataclasses.dataclass
class Cfg:
    k: float = 2.0


def to_dtype(x, dt):
    return x.to(dt) * 2


def by_mode(x, mode):
    return x * 2 if mode is Mode.A else x * 3


def apply(x, f):
    return f(x)


def scaled(x, cfg):
    return x * cfg.k


def by_complex(x, c):
    return x * c.real


def by_bytes(x, b):
    return x * len(b)


CASES = {   # fn, traced constant, an equal constant (runs), another constant (refused)
    "dtype": (to_dtype, torch.float64, torch.float64, torch.float16),
    "enum": (by_mode, Mode.A, Mode.A, Mode.B),
    "function": (apply, torch.relu, torch.relu, torch.tanh),
    "namespace": (scaled, types.SimpleNamespace(k=2.0), types.SimpleNamespace(k=2.0), types.SimpleNamespace(k=3.0)),
    "dataclass": (scaled, Cfg(), Cfg(2.0), Cfg(3.0)),
    "complex": (by_complex, 2 + 1j, 2 + 1j, 3 + 1j),
    "bytes": (by_bytes, b"ab", b"ab", b"abc"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_another_constant_argument_is_refused_not_answered_silently(case):
    fn, const, equal, other = CASES[case]
    x = torch.randn(2, 3)
    traced = tracejit.trace(fn, (x, const))
    with pytest.raises(RuntimeError):   # torch.jit.trace takes tensors (and containers of them) only
        _quiet(torch.jit.trace, fn, (x, const))
    y = torch.randn(2, 3)
    want, frozen = fn(y, other), fn(y, const)
    assert not (torch.equal(frozen, want) and frozen.dtype == want.dtype)   # the traced constant's answer is wrong
    got = traced(y, equal)
    assert torch.equal(got, fn(y, equal)) and got.dtype == fn(y, equal).dtype
    with pytest.raises(tracejit.ArgumentValueError, match="was traced as the constant"):
        traced(y, other)


def test_a_config_object_argument_changed_in_place_is_refused():
    cfg = types.SimpleNamespace(k=2.0)
    x = torch.randn(3)
    traced = tracejit.trace(scaled, (x, cfg))
    assert torch.equal(traced(x, cfg), scaled(x, cfg))
    cfg.k = 3.0
    with pytest.raises(tracejit.ArgumentValueError, match="'cfg'"):
        traced(x, cfg)


def _closure():
    factor = [2.0]
    offset = 1.0

    def f(x):
        return x * factor[0] + offset
    return f, factor


def test_a_closure_variable_changed_after_the_trace_gives_eager_s_answer():
    f, factor = _closure()
    x = torch.randn(3)
    traced = tracejit.trace(f, (x,))
    jit = _quiet(torch.jit.trace, f, (x,))
    factor[0] = 5.0
    assert not torch.equal(jit(x), f(x))
    assert torch.equal(_quiet(traced, x), f(x))


MODE = Mode.A


def by_global_mode(x):
    return x * 2 if MODE is Mode.A else x * 3


def test_an_enum_global_changed_after_the_trace_gives_eager_s_answer(monkeypatch):
    import sys
    x = torch.randn(3)
    traced = tracejit.trace(by_global_mode, (x,))
    jit = _quiet(torch.jit.trace, by_global_mode, (x,))
    monkeypatch.setattr(sys.modules[__name__], "MODE", Mode.B)
    assert not torch.equal(jit(x), by_global_mode(x))
    assert torch.equal(_quiet(traced, x), by_global_mode(x))


def test_a_loaded_program_refuses_another_dtype_argument(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "cache"))
    path = str(tmp_path / "m.tjit")
    x = torch.randn(2, 3)
    tracejit.save(tracejit.trace(to_dtype, (x, torch.float64)), path)
    first, cached = tracejit.load(path), tracejit.load(path)   # the second made from the code cache
    assert len(list((tmp_path / "cache").iterdir())) == 1       # (the check is inline: still cacheable)
    for loaded in (first, cached):
        assert torch.equal(loaded(x, torch.float64), to_dtype(x, torch.float64))
        with pytest.raises(tracejit.ArgumentValueError, match="'dt'"):
            loaded(x, torch.float16)
