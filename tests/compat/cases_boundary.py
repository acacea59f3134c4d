"""Differential cases for the boundary rule (issue #20): the patterns of tests/guards/boundary_patterns.py.

torch.jit.trace freezes every one of these Python values silently; tracejit gives eager's answer
(a live retrace) or a GuardError, and refuses the reads no guard can check (docs/COMPAT.md:
`boundary-guards`, `boundary-refusals`).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "guards"))
import boundary_patterns as bp  # noqa: E402
from harness import Case  # noqa: E402
from tracejit.trace.boundary import BoundaryError  # noqa: E402

_SOURCE = "tests/guards/boundary_patterns.py (transformers, timm, research code, attacks on the rule)"


def _case(p: bp.Case) -> Case:
    module = isinstance(p.fn, type)
    # the harness clones each input, which resets a tensor's version counter: nothing left to move
    return Case(f"boundary_{p.name}", p.fn, p.example, p.new, module=module, deliberate="boundary-guards",
                moves=p.name != "version_counter", source=_SOURCE)


def tracing_branch(x):                  # transformers' trace-friendly paths: True while either tracer records
    if torch.jit.is_tracing():
        return x * 2
    return x * 3


CASES = [_case(p) for p in bp.CASES + bp.REPLAYS] + [
    # both tracers answer torch.jit.is_tracing() True while recording: both programs keep that branch (no difference)
    Case("boundary_jit_is_tracing_branch", tracing_branch, (torch.randn(3),), [(torch.randn(4),)],
         source="transformers (torch.jit.is_tracing() branches)", trace_kwargs={"check_trace": False}),
    Case("boundary_refuses_storage_address", bp.storage_address, (torch.randn(3),), [(torch.randn(1),)],
         deliberate="boundary-refusals", refuses=BoundaryError, source=_SOURCE,
         trace_kwargs={"check_trace": False}),
    Case("boundary_refuses_alias_check", bp.alias_check, (torch.randn(3), torch.randn(3)),
         [(lambda t: (t, t))(torch.randn(3))], deliberate="boundary-refusals", refuses=BoundaryError,
         source=_SOURCE, trace_kwargs={"check_trace": False}),
]
