"""The round-25 call-time work files (catalogue_round25.py) loaded and called in a child process capped in memory
and CPU time: each loads (every size in it is legal) and its call raises BudgetError before the kernel runs,
never runs for minutes; the unedited programs answer as eager on another shape; the refusal names the op and
the work; and the work rules count what the kernels do on shapes other than the files'."""
from __future__ import annotations

import io

import pytest
import torch

import tracejit
from catalogue_round25 import X, _op_files, hostile_cases, legit_cases
from security_testlib import graphs, rewrite, round_problems, traced_bytes
from tracejit.serialize import size_rules
from tracejit.support import call_budget
from tracejit.support.call_budget import WORK_FACTOR

CPU_S = 2.0


@pytest.fixture(scope="module")
def files():
    return _op_files()


def test_round25_files_are_refused_before_the_kernel(tmp_path, files):
    problems = round_problems(tmp_path, hostile_cases(files), legit_cases(files), CPU_S)
    assert not problems, "\n".join(problems)


def test_the_refusal_names_the_op_and_its_work(monkeypatch, files):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    # the per-op check behind round 27's load-time claim (which refuses these files at load): the claim lifted
    monkeypatch.setattr(call_budget, "CLAIM_FACTOR", 2 ** 62)
    by_name = {n: raw for n, raw, _, _ in hostile_cases(files)}
    for name, op in (("matrix_power_2_62", "matrix_power"), ("multilabel_margin_2_20", "multilabel_margin_loss"),
                     ("lstm_16000_steps", "lstm")):
        loaded = tracejit.load(io.BytesIO(by_name[name]))
        with pytest.raises(tracejit.BudgetError, match=rf"aten::{op} at .* would compute \d+ multiply-adds"):
            loaded(torch.randn(3, 8))


def _meta(*shape):
    return torch.empty(*shape, device="meta")


@pytest.mark.parametrize("k,n", [(5, 9), (3, 2 ** 40), (7, -6), (2, 1)])
def test_matrix_power_work_covers_its_products(k, n):
    """Two products per bit of n (squares and multiplies), an inverse for a negative n: counted at least as
    the products eager's repeated squaring makes (counted by a dispatch-level count of mm calls)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        products = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name in ("aten::mm", "aten::bmm", "aten::matmul", "aten::linalg_inv_ex"):
                Count.products += 1
            return func(*args, **(kwargs or {}))

    x = torch.eye(k, dtype=torch.float64) + 0.01 * torch.randn(k, k, dtype=torch.float64)
    with Count():
        torch.matrix_power(x, n)
    counted = size_rules.rule("matrix_power").flops({"self": _meta(2, k, k), "n": n})
    assert counted >= 2 * Count.products * k ** 3


def test_recurrent_and_multilabel_work_grows_with_what_the_kernel_loops_over():
    lstm = size_rules.rule("lstm").flops
    small = lstm({"input": _meta(10, 2, 5), "params": [_meta(12, 5), _meta(12, 3)]})
    assert small == 10 * 2 * (12 * 5 + 12 * 3)
    assert lstm({"input": _meta(20, 2, 5), "params": [_meta(12, 5), _meta(12, 3)]}) == 2 * small
    ml = size_rules.rule("multilabel_margin_loss").flops
    assert ml({"self": _meta(3, 64), "target": _meta(3, 64)}) == 4 * ml({"self": _meta(3, 32), "target": _meta(3, 32)})
    # the files' shapes are far past the work a 3 x 8 call may do
    budget = WORK_FACTOR * 2 ** 25
    assert ml({"self": _meta(1, 2 ** 20), "target": _meta(1, 2 ** 20)}) > budget
    assert lstm({"input": _meta(16000, 1, 1), "params": [_meta(8192, 1), _meta(8192, 2048)]}) > budget


def test_refused_constants_say_what_and_where(monkeypatch, files):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    by_name = {n: raw for n, raw, _, _ in hostile_cases(files)}
    for name, fragment in (
            ("upsample_size_0",
             r"node \d+ \(aten::upsample_nearest2d.default\): .*output size \[0, 5\] must be positive"),
            ("cdist_compute_mode_7", r"aten::cdist: compute_mode 7 must be 0, 1 or 2"),
            ("stft_window_over_n_fft", r"aten::stft: win_length 20 must be between 1 and n_fft \(8\)"),
            ("histc_min_over_max", r"aten::histc: min 5.0 must not be larger than max"),
            ("circular_pad_wraps_twice", r"circular padding \[7, 7, 1, 1\] wraps dimension 3 of size 6")):
        with pytest.raises(tracejit.LoadError, match=fragment):
            tracejit.load(io.BytesIO(by_name[name]))


def _out_into(producer_op):
    """The file's mul as ``aten::mul.out`` writing into the graph's input (``producer_op`` None) or into the
    output of its first ``producer_op`` node (the file's constant)."""
    def edit(doc):
        g = graphs(doc)[0]
        target, v = 0, len(g["inputs"])
        for n in g["nodes"]:
            if producer_op is not None and n["op"] == producer_op:
                target = v
                break
            v += len(n["outputs"])
        mul = next(n for n in g["nodes"] if n["op"].startswith("aten::mul"))
        mul["op"], mul["kwargs"] = "aten::mul.out", [["out", {"v": target}]]
    return edit


def test_out_may_name_only_a_tensor_the_program_made(monkeypatch, tmp_path):
    """``out=`` writes into, and resizes, the tensor it names: a file's ``aten::mul.out`` into the caller's input
    (it wrote into the caller's x) or into a constant of the file is a LoadError; a program that writes into a
    tensor it made (a traced ``torch.mul(x, 2, out=buf)``) saves, loads and answers as eager on another input;
    ``save`` refuses one writing into its input, naming out=."""
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    w = torch.linspace(-1, 1, 4)
    raw = traced_bytes(lambda x: torch.mul(x, w) + 1, (torch.randn(4),))
    for producer, what in ((None, "an input of the call"), ("tracejit::constant", "a constant of the file")):
        with pytest.raises(tracejit.LoadError, match=rf"aten::mul.out\): its out= names {what}"):
            tracejit.load(io.BytesIO(rewrite(raw, edit_doc=_out_into(producer))))

    def made(x):
        buf = torch.zeros(x.shape[0])
        torch.mul(x, 2.0, out=buf)
        return buf + 1
    loaded = tracejit.load(io.BytesIO(traced_bytes(made, (torch.randn(4),))))
    x = torch.randn(7)
    assert torch.equal(loaded(x), made(x))

    def into_input(x):
        torch.mul(x, 2.0, out=x)
        return x + 1
    with pytest.raises(tracejit.SaveError, match="out= names an input of the call"):
        tracejit.save(tracejit.trace(into_input, torch.randn(4)), str(tmp_path / "f.tjit"))
