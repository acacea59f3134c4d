"""Generative differential test: hypothesis writes small forward functions, tracejit must match eager.

A grammar of one-line statements (tensor ops; size and value reads; branches on sizes and values;
``in``; f-strings; dict lookups keyed by a size; int methods; NaN / signed-zero reads; seeding inside
forward; a numpy method given a size, also through a subscript; ``tolist`` / ``any`` / ``max(x.shape)`` /
``len(x)`` / ``math.prod`` / ``divmod`` / ``sorted`` / ``'%.1f' %`` / ``finfo`` reads of real code) is built
into a real Python function (compiled, its source registered with linecache so guards name
lines). It is traced on one input and called on new ones (other lengths, other values, NaN and
-0.0 among them): live, the traced object must give eager's answer (it retraces where a guard
fails); loaded from a file, eager's answer or GuardError. Never another answer.

CI runs a small budget; ``TRACEJIT_GRAMMAR_EXAMPLES=2000`` runs a long one.
"""
from __future__ import annotations

import linecache
import math
import operator
import os
import warnings

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracejit
from trace_testlib import roundtrip

STATEMENTS = [
    "x = x * 2",
    "x = x.relu() + 1",
    "x = torch.cumsum(x, 0)",
    "x = x - x.mean()",
    "x = x * 2 if x.size(0) > 3 else x - 1",
    "x = x * (x.size(0) % 3)",
    "x = x * (x.size(0) - 1).bit_length()",
    "x = x * 2 if x.size(0) in {2, 4} else x",
    "x = x * {3: 2.0, 5: -1.0}.get(x.size(0), 1.0)",
    "x = x * len(f'{x.size(0)}_{x.size(0) * 7}')",
    "x = x * (~x.size(0))",
    "x = x * (x.size(0) & 2)",
    "x = x * float(x.size(0) / 3)",
    "x = x * 2 if x.sum() > 0 else x - 1",
    "x = x * (x.max().item() > 1)",
    "x = x + 1 if 0.0 in x else x",
    "x = x * 3 if torch.allclose(x, x.abs()) else x",
    "x = x * len(f'{x.max():.0f}')",
    "x = x * 2 if x.is_contiguous() else x",
    "x = x + math.copysign(1.0, x.min().item())",
    "x = x * len([1.0] * x.size(0))",
    "x = x * operator.index(x.size(0))",
    "x = x * (1 << (x.size(0) % 4))",
    "x = x[: max(1, x.size(0) - 1)]",
    "x = torch.cat([x, x[:1]])",
    "x = x * (2 if str(x.size(0)) == '3' else 1)",
    "x = x * len(repr(x.size(0) / 2))",
    "x = x + (torch.manual_seed(x.size(0)) and torch.rand(x.shape))",
    "x = x + torch.randn(x.shape, generator=torch.Generator().manual_seed(5))",
    "x = x * float(np.arange(12.0).reshape(-1, 2).take(x.size(0) % 12))",
    # round 4: Python-side reads found in real forward code (tests/guards/boundary_real_patterns.py)
    "x = x * (sum(x.tolist()) > 0)",
    "x = x * 2 if any(v > 0 for v in x) else x - 1",
    "x = x * max(x.shape)",
    "x = x * len(x)",
    "x = x * math.prod(x.shape)",
    "x = x * divmod(x.size(0), 2)[1]",
    "x = x * sorted([x.size(0), 3])[0]",
    "x = x * [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0][int(x.argmax())]",
    "x = x * len('%.1f' % x.max().item())",
    "x = x * 2 if list(x.shape) == [3] else x",
    "x = x.masked_fill(x < 0, torch.finfo(x.dtype).min)",
    "x = x * (-(-x.size(0) // 3))",
    "x = x * float([np.ones(12)][0].reshape(-1, 2 + x.size(0) % 2).shape[1])",
]
VALUES = [-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, float("nan")]
EXAMPLES = int(os.environ.get("TRACEJIT_GRAMMAR_EXAMPLES", "30"))

_count = [0]


def build(statements: list[str]):
    """A real Python function from the statements, with its source in linecache."""
    _count[0] += 1
    filename = f"<grammar-{_count[0]}>"
    source = "def forward(x):\n" + "".join(f"    {s}\n" for s in statements) + "    return x\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"torch": torch, "math": math, "operator": operator, "np": np}
    exec(compile(source, filename, "exec"), scope)   # noqa: S102  (the grammar's own text)
    return scope["forward"]


def tensors(min_size=1, max_size=6):
    return st.lists(st.sampled_from(VALUES), min_size=min_size, max_size=max_size).map(torch.tensor)


def same(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=1e-5, atol=1e-5, equal_nan=True) \
        and torch.equal(torch.signbit(a[a == 0]), torch.signbit(b[b == 0]))


def eager_or_none(fn, x):
    try:
        return fn(x)
    except Exception:  # noqa: BLE001  (a program eager itself cannot run tells nothing)
        return None


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=EXAMPLES <= 30)
@given(statements=st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=4), example=tensors(),
       new=st.lists(tensors(), min_size=1, max_size=3))
def test_traced_matches_eager_or_raises_guard_error(statements, example, new):
    fn = build(statements)
    if eager_or_none(fn, example) is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(fn, example, check_trace=False)
        loaded = roundtrip(traced)
        for x in new:
            want = eager_or_none(fn, x.clone())
            if want is None:
                continue
            got = traced(x.clone())
            assert same(got, want), (statements, example, x, got, want)
            try:
                got = loaded(x.clone())
            except tracejit.GuardError as e:
                assert e.source is not None and e.source.filename.startswith("<grammar-"), str(e)
                continue
            assert same(got, want), ("loaded", statements, example, x, got, want)
