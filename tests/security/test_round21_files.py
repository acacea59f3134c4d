"""The round-21 op-constant files (catalogue_round21.py) loaded and called in a child process capped in memory
and CPU time: each is refused at load with a LoadError (or, one_hot's class values, its call raises GuardError
before the kernel runs), never a raw RuntimeError / IndexError from ATen; the unedited programs answer as
eager on another shape; and the refusals name the node, the argument and the range."""
from __future__ import annotations

import io

import pytest
import torch

import tracejit
from catalogue_round21 import X, _op_files, hostile_cases, legit_cases
from security_testlib import round_problems

CPU_S = 2.0


@pytest.fixture(scope="module")
def files():
    return _op_files()


def test_round21_files_are_refused_at_load_or_before_the_kernel(tmp_path, files):
    problems = round_problems(tmp_path, hostile_cases(files), legit_cases(files), CPU_S)
    assert not problems, "\n".join(problems)


def test_the_refusals_say_what_and_where(monkeypatch, files):
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", "")
    by_name = {n: raw for n, raw, _, _ in hostile_cases(files)}
    for name, fragment in (
            ("narrow_past_the_end", r"node 0 \(aten::narrow.default\): aten::narrow: start 2 \+ length 7 exceeds "
                                    r"dimension 1 of size 8"),
            ("select_index_int64_min", r"index -9223372036854775808 out of range for dimension 1 of size 8"),
            ("topk_k_2_40", r"aten::topk: k 1099511627776 out of range .* \(expected 0 to 8\)"),
            ("kthvalue_k_0", r"k 0 out of range .* \(expected 1 to 8\)"),
            ("unfold_step_0", r"aten::unfold: step 0 must be positive"),
            ("roll_shift_int64_min", r"aten::roll: shifts \[-9223372036854775808\] out of range"),
            ("gather_dim_5", r"aten::gather: dim 5 is out of range for tensors of at most 2 dimensions"),
            ("one_hot_classes_negative", r"num_classes -5 must be -1 or non-negative")):
        with pytest.raises(tracejit.LoadError, match=fragment):
            tracejit.load(io.BytesIO(by_name[name]))
    loaded = tracejit.load(io.BytesIO(by_name["one_hot_classes_2"]))
    with pytest.raises(tracejit.GuardError, match=r"aten::one_hot.*class values 3 to 3 must lie in \[0, num_classes=2\)"):
        loaded(torch.full((3, 8), 1.6))
    assert X == "1:3,8"


def test_recurrent_cells_and_spectral_norms_have_rules():
    """lstm_cell & co make batch x gate rows from an input [B, in] and w_ih [G, in] (an outer product when in is
    1: the broadcast-or-sum default said B + G); spectral / nuclear norms take an SVD (cubic work)."""
    from tracejit.serialize import size_rules
    meta = lambda *s: torch.empty(*s, device="meta")   # noqa: E731
    for op in ("lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell"):
        b = {"input": meta(3000, 1), "w_ih": meta(12000, 1), "w_hh": meta(12000, 3000)}
        assert size_rules.rule(op).elements(b) >= 3000 * 12000, op
    b = {"self": meta(700, 900), "ord": "nuc", "dim": [-2, -1]}
    assert size_rules.rule("linalg_matrix_norm").flops(b) >= 700 ** 2 * 900
    assert size_rules.rule("nuclear_norm").flops({"self": meta(700, 900)}) >= 700 ** 2 * 900
    assert size_rules.rule("linalg_norm").flops({"self": meta(700, 900), "ord": None, "dim": None}) is None
