"""The op allow-list (tracejit/serialize/op_allowlist.py): one reviewed table that holds every op the
model corpus records, gives every op an argument check, and refuses the rest by name."""
from __future__ import annotations

import io
import os
import sys
import warnings

import pytest
import torch

import tracejit
from filesurgery import parse
from tracejit.serialize import op_allowlist, op_checks, schema_check
from tracejit.trace import ops as opnames

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))
from model_corpus import SPECS, run, traced_case, assert_outputs_equal  # noqa: E402


def _aten_ops(raw: bytes) -> set:
    doc, _ = parse(raw)
    return {n["op"] for g in doc["program"]["graphs"] for n in g["nodes"] if n["op"].startswith("aten::")}


@pytest.mark.parametrize("model", sorted(SPECS))
def test_every_op_the_model_corpus_records_is_allowed_and_the_loaded_model_runs(model):
    case = traced_case(model)
    buf = io.BytesIO()
    tracejit.save(case.traced, buf)
    names = {op[6:].partition(".")[0] for op in _aten_ops(buf.getvalue())}
    assert names, "the trace recorded no ATen op"
    assert not [n for n in names if op_allowlist.family(n) is None], f"{model}: ops off the allow-list"
    loaded = tracejit.load(io.BytesIO(buf.getvalue()))
    # the loaded program (with its call-time checks) computes what eager computes on other inputs
    for alt in case.spec.alts:
        assert_outputs_equal(run(loaded, case.inputs[alt]), case.eager(alt), f"{model} loaded, on {alt}")


def test_every_allowed_op_exists_has_a_check_and_a_review():
    for fam in op_allowlist.FAMILIES:
        assert callable(fam.check) and len(fam.review) > 40, fam.name
        for op in fam.ops:
            if opnames.aten_packet(op) is None:
                # the list is reviewed against the pinned torch; a later release may drop an op (2.15:
                # cholesky), and a file naming it then fails to load as any unknown op does
                assert not torch.__version__.startswith("2.13."), f"{fam.name}: aten::{op} does not exist"
                continue
            assert not schema_check.is_denied_op(op), f"{fam.name}: aten::{op} matches the refused names"
            private = op.startswith("_") and not (op.startswith("__") and op.endswith("__"))  # not __and__
            assert not private or fam.name in ("private", "amplifiers"), \
                f"{fam.name}: private aten::{op} outside the reviewed-one-by-one family"
            if op_allowlist.family(op).check is op_checks.sized:
                assert op_allowlist.size_rule(op) is not None, f"aten::{op} is sized but has no size rule"
    private = next(f for f in op_allowlist.FAMILIES if f.name == "private")
    for op in private.ops:
        assert op in private.review, f"private aten::{op} has no review of its own"


@pytest.mark.parametrize("op", ["native_batch_norm", "_sobol_engine_draw", "segment_reduce", "grid_sampler_2d",
                                "fused_moving_avg_obs_fake_quant", "embedding_bag", "_cummax_helper"])
def test_ops_that_trust_their_arguments_are_off_the_list(op):
    assert opnames.aten_packet(op) is not None
    assert op_allowlist.family(op) is None


def test_inplace_variants_follow_their_family():
    assert op_allowlist.family("add_") is op_allowlist.family("add")
    assert op_allowlist.family("masked_fill_") is not None
    assert op_allowlist.family("expand_") is None          # amplifiers have no in-place variants
    assert op_allowlist.family("_softmax_") is None        # nor private ops


def test_an_unlisted_op_is_a_load_error_naming_it(tmp_path):
    from filesurgery import rewrite
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(lambda x: x.cumsum(0) * 2, torch.randn(4))
    buf = io.BytesIO()
    tracejit.save(traced, buf)

    def edit(doc):
        for n in (x for g in doc["program"]["graphs"] for x in g["nodes"]):
            if n["op"].startswith("aten::cumsum"):
                n["op"], n["target"], n["args"] = "aten::_cummax_helper.default", "fn:torch._cummax_helper", [
                    {"v": 0}, {"v": 0}, {"v": 0}, 0]
    raw = rewrite(buf.getvalue(), edit_doc=edit)
    with pytest.raises(tracejit.LoadError, match=r"aten::_cummax_helper is not on the allow-list of ops a file may "
                                                 r"name"):
        tracejit.load(io.BytesIO(raw))


# ops the suite records (hostile files, refused layouts, uninitialised memory, unreviewed kernels) that
# files may not name
REFUSED_ON_PURPOSE = {
    "__set__": "a made-up name in a hostile-file test", "definitely_not_an_op": "a made-up name",
    "_assert_async": "process state", "from_file": "reads files", "set_": "raw storage",
    "_set_grad_enabled": "recorded as grad-mode regions, never as an ATen node of a file",
    "_nested_tensor_from_tensor_list": "nested layout", "to_dense": "sparse layouts", "to_sparse": "sparse layouts",
    "empty_like": "returns memory it never wrote (a file could hand the process's old data to its output)",
    "new_tensor": "no ATen operator of this name in this torch: the loader refuses it as unknown",
    "embedding_bag": "offsets and per-sample weights are trusted by the kernel; not reviewed yet",
}


def test_every_op_the_suite_records_is_allowed_or_refused_on_purpose():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recorded_ops.txt")
    with open(path) as f:
        names = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert len(names) > 200
    missing = [n for n in names if op_allowlist.family(n) is None and n not in REFUSED_ON_PURPOSE]
    assert not missing, f"recorded by the suite, but neither allowed nor refused on purpose: {missing}"
    assert not [n for n in REFUSED_ON_PURPOSE if op_allowlist.family(n) is not None]
