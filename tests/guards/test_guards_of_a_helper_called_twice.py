"""A helper called twice with two traced sizes of one value (a square image's height and width) gets a guard for each.

The source scans (trace/index_reads.py, operand_scan.py, numpy_calls.py, stdlib_calls.py) guard a traced size read
where no Python hook sees it (``0.5 * n``, ``table[n]``, ``np.sqrt(n)``, ``json.dumps(n)``), once per site. The site
was keyed by ``id(frame)`` and the size's value: the second call's frame, made where the first one's had been freed,
had the same id, so the second size was not guarded at all. timm's MaxViT lost the guard of its width in
``get_same_padding`` whenever the allocator reused the frame's address (its trace check failed about one build in
eight; with ``check_trace=False`` the program kept the traced width: found by the suite at three workers). Now the
site is keyed by the size's graph value. Each case: traced on a square input without the check, called on a
non-square one; eager's answer (a live function traces again) and one guard per dimension."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import tracejit

TABLE = [0.0, 1.0, 4.0, 9.0, 16.0, 25.0, 36.0, 49.0, 64.0, 81.0, 100.0, 121.0, 144.0, 169.0]


def _half(n):
    return 0.5 * n                # float.__mul__ reads the int's digits: operand_scan.py


def _lookup(n):
    return TABLE[n]               # a list index: index_reads.py


def _root(n):
    return float(np.sqrt(n))      # numpy reads the number in C: numpy_calls.py


def _digits(n):
    return len(json.dumps(n * 1000))   # standard-library code handing it to C: stdlib_calls.py


HELPERS = {"operand": _half, "index": _lookup, "numpy": _root, "stdlib": _digits}


@pytest.mark.parametrize("kind", sorted(HELPERS))
def test_each_call_of_the_helper_guards_its_own_size(kind):
    helper = HELPERS[kind]

    def f(x):
        return x * helper(x.shape[-2]) + helper(x.shape[-1])

    example = torch.randn(9, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace(f, example, check_trace=False)
        size_guards = [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs.get("kind") == "size"]
        assert len(size_guards) == 2, [n.attrs.get("what") for n in size_guards]
        for shape in ((9, 13), (13, 9), (9, 9)):
            x = torch.randn(*shape)
            want = f(x)
            frozen = x * helper(9) + helper(9)   # the trace's numbers: what a program without the guard answers
            assert shape == (9, 9) or not torch.allclose(want, frozen)   # the new size moves the answer
            torch.testing.assert_close(traced(x), want)


def test_without_the_original_a_loaded_program_names_the_second_calls_line(tmp_path):
    def f(x):
        return x * _half(x.shape[-2]) + _half(x.shape[-1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace(f, torch.randn(9, 9), check_trace=False)
    tracejit.save(traced, tmp_path / "f.tjit")
    loaded = tracejit.load(tmp_path / "f.tjit")
    torch.testing.assert_close(loaded(torch.ones(9, 9)), f(torch.ones(9, 9)))
    with pytest.raises(tracejit.GuardError, match="_half|0.5 \\* n"):
        loaded(torch.ones(9, 13))
