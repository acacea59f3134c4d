"""``len(tensor)`` records what ``tensor.shape[0]`` records (trace/len_reads.py; issue #25: torchvision's pooler
``num_rois = len(rois)``): a traced size where the first dim follows the inputs or the data, so a program built
without the original (a loaded file, ONNX in onnxruntime) follows the count; ``len()`` used in a Python ``if`` or
``range`` is still a guard naming its line. torch.jit.trace freezes ``len()`` (its TracerWarning) and answers with
the example's count."""
from __future__ import annotations

import builtins

import pytest
import torch

import tracejit
from trace_testlib import marker_lines, quiet, roundtrip

line_of = marker_lines(__file__)


def kept_rows(x):
    rows = x[x.sum(1) > 0]
    n = len(rows)  # @len_kept
    return torch.zeros((n, 2)) + rows.mean(), rows * n


def longer_than_two(x):
    if len(x) > 2:  # @len_if
        return x * 2
    return x - 1


def summed_by_index(x):
    acc = x[0]
    for i in range(1, len(x)):  # @len_range
        acc = acc + x[i]
    return acc


def with_len_bound_before(x, _len=len):
    return x.new_zeros(_len(x)) + x.sum()  # @len_bound


def _rows(n_kept, n_dropped, seed):
    gen = torch.Generator().manual_seed(seed)
    kept = torch.rand(n_kept, 3, generator=gen) + 0.1
    dropped = -torch.rand(n_dropped, 3, generator=gen) - 0.1
    return torch.cat([kept, dropped])[torch.randperm(n_kept + n_dropped, generator=gen)]


def test_len_of_a_data_dependent_size_follows_the_data_side_by_side_with_jit():
    example = _rows(3, 2, 0)
    traced = quiet(tracejit.trace, kept_rows, (example,))
    assert not [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "length"]
    loaded = roundtrip(traced)   # no original: a guard on the count would raise
    reference = quiet(torch.jit.trace, kept_rows, (example,), check_trace=False)
    for n_kept, n_dropped in ((5, 1), (1, 3), (7, 0)):
        x = _rows(n_kept, n_dropped, n_kept)
        want = kept_rows(x)
        assert want[0].shape[0] == n_kept
        for got in (traced(x), loaded(x)):
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=0, atol=0)
        assert reference(x)[0].shape[0] == 3, "torch.jit.trace's program keeps the example's count"
    assert traced._specializations.traces == 0
    # gradients through rows * len(rows), on a count the trace did not see
    x = _rows(4, 2, 9).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    loaded(x)[1].sum().backward()
    kept_rows(x_eager)[1].sum().backward()
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=0, atol=0)
    assert x.grad.abs().max() == 4


def test_len_of_a_data_dependent_size_in_onnxruntime():
    pytest.importorskip("onnxruntime")
    example = _rows(3, 2, 0)
    with torch.no_grad():
        traced = quiet(tracejit.trace, kept_rows, (example,))
        program = quiet(tracejit.optimize_for_inference, traced, backend="onnxruntime")
        for n_kept, n_dropped in ((5, 1), (1, 3)):
            x = _rows(n_kept, n_dropped, n_kept)
            for g, w in zip(program(x), kept_rows(x), strict=True):
                torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_len_in_a_python_branch_guards_the_predicate_at_its_line():
    traced = quiet(tracejit.trace, longer_than_two, (torch.rand(4),))
    loaded = roundtrip(traced)
    for n in (3, 9):   # every length the branch takes alike reuses the trace
        x = torch.rand(n)
        torch.testing.assert_close(loaded(x), longer_than_two(x), rtol=0, atol=0)
    with pytest.raises(tracejit.GuardError, match=f"guard failed at \\S+test_len_reads.py:{line_of('len_if')}"):
        loaded(torch.rand(2))
    x = torch.rand(2)
    torch.testing.assert_close(quiet(traced, x), x - 1, rtol=0, atol=0)   # the traced object retraces instead


def test_len_in_range_guards_the_count_at_its_line():
    traced = quiet(tracejit.trace, summed_by_index, (torch.rand(3, 2),))
    loaded = roundtrip(traced)
    x = torch.rand(3, 2)
    torch.testing.assert_close(loaded(x), summed_by_index(x), rtol=0, atol=0)
    with pytest.raises(tracejit.GuardError, match=f"guard failed at \\S+test_len_reads.py:{line_of('len_range')}"):
        loaded(torch.rand(4, 2))


def test_len_bound_before_the_trace_stays_a_length_guard():
    """Default-deny: a ``len`` the stand-in cannot replace (bound before the trace) is frozen and guarded."""
    traced = quiet(tracejit.trace, with_len_bound_before, (torch.rand(3),))
    guards = [n for n in traced.graph.nodes if n.op == "tracejit::guard" and n.attrs["kind"] == "length"]
    assert len(guards) == 1 and guards[0].source.lineno == line_of("len_bound")
    with pytest.raises(tracejit.GuardError, match="len"):
        roundtrip(traced)(torch.rand(5))


def _reads_len(x):
    assert len([1, 2]) == 2 and len("abc") == 3 and len(torch.ones(4)) == 4   # plain values: a constant
    return x * len(x)


def test_len_of_other_objects_and_of_a_0d_tensor_is_the_builtins():
    original = builtins.len
    traced = quiet(tracejit.trace, _reads_len, (torch.rand(3),))
    assert builtins.len is original, "the stand-in is gone after tracing"
    x = torch.rand(6)
    torch.testing.assert_close(roundtrip(traced)(x), x * 6, rtol=0, atol=0)
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        quiet(tracejit.trace, lambda x: x * len(x.sum()), (torch.rand(3),))
