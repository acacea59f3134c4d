"""While a trace is on, tracejit's stand-ins (trace/patches.py: ``operator.index``, ``math.*``,
``nn.Module.__call__``, ...) answer ``inspect.signature`` as the functions they stand for: code that
runs mid-trace may introspect them. torch 2.15 imports ``torch._dynamo`` the first time a Python
meta kernel runs (``batch_norm`` on the ``meta`` device, inside a trace), and that import checks
each function it gives a polyfill against the polyfill's signature; ``operator.index``'s stand-in
failed it, the import stopped half-way and every later trace on ``meta`` in the process failed
(issue #23: "Duplicate dispatch rule", ``running_var + eps`` TypeError)."""
from __future__ import annotations

import inspect
import operator
import os
import subprocess
import sys

import torch

import tracejit
from tracejit.trace import patches


def test_stand_ins_report_the_signature_of_what_they_stand_for():
    outside = {"index": inspect.signature(operator.index), "call": inspect.signature(torch.nn.Module.__call__)}
    seen = {}

    def f(x):
        if operator.index is not _REAL_INDEX:   # the stand-ins are installed (the trace; not the check's eager run)
            assert torch.nn.Module.__call__ is not _REAL_CALL
            seen.update(index=inspect.signature(operator.index), call=inspect.signature(torch.nn.Module.__call__))
        return x + 1

    tracejit.trace(f, (torch.ones(2),), allow_frozen_python_state=True)   # `seen`: a spy
    assert seen == outside
    assert operator.index is _REAL_INDEX and torch.nn.Module.__call__ is _REAL_CALL   # removed after the trace


_REAL_INDEX = operator.index
_REAL_CALL = torch.nn.Module.__call__


def test_a_stand_in_keeps_a_signature_it_set_itself_and_builtins_without_one_are_skipped():
    def stand_in(*args):
        return args

    stand_in.__signature__ = inspect.Signature()
    patches._same_signature(stand_in, operator.index)
    assert inspect.signature(stand_in) == inspect.Signature()

    def other(*args):
        return args

    patches._same_signature(other, max)   # max has no text signature: the stand-in's own stays
    assert "__signature__" not in other.__dict__


CHILD = """
import sys, warnings
import torch, tracejit
assert "torch._dynamo" not in sys.modules, "imported before the trace: the case is not reproduced"
def f(x):
    import torch._dynamo   # the first import of torch._dynamo in the process, while the stand-ins are on
    return x * 2
warnings.simplefilter("ignore")
traced = tracejit.trace(f, (torch.ones(3),), check_trace=False)   # the check would rerun f with it imported
assert torch.equal(traced(torch.arange(4.0)), torch.arange(4.0) * 2)
import torch._dynamo
bn = torch.nn.BatchNorm2d(4, device="meta").eval()   # a Python meta kernel on 2.15: the issue's failure
out = tracejit.trace(bn, (torch.randn(2, 4, 3, 3, device="meta"),), check_trace=False)(
    torch.randn(5, 4, 3, 3, device="meta"))
assert out.shape == (5, 4, 3, 3) and out.device.type == "meta"
print("ok")
"""


def test_torch_dynamo_first_imported_mid_trace_imports_whole():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
