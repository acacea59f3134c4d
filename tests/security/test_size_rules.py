"""The size rules of loaded programs (tracejit/serialize/size_rules.py): default-deny (every allowed op
has a rule or a family that says why it is bounded by its inputs), each rule counts at least what
eager allocates on shapes other than any trace's, products ([n, 1] x [1, n], broadcast batches) are
refused at call time before they allocate, and ordinary models are not refused."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import nn

import tracejit
from tracejit.support import call_budget
from tracejit.serialize import op_allowlist, size_rules
from tracejit.trace import ops as opnames

# int arguments whose name says they size an output (what schema_check counted before the rules)
SIZING_NAMES = {"size", "sizes", "repeats", "shape", "n", "m", "s", "steps", "num_samples", "minlength",
                "num_classes", "bins", "length", "output_size", "window_length", "n_fft", "count", "N", "M",
                "row", "col", "pad", "padding", "r", "output_padding", "kernel_size", "split_size", "split_sizes"}
# (op, argument): why that argument, in an op with no size rule, sizes nothing beyond the inputs
NOT_SIZING = {
    ("diff", "n"): "differences: fewer elements than the input",
    ("polygamma", "n"): "the order of the derivative, not a size",
    ("mul", "n"): "a list repeated n times: bounded by the call-time int check (call_budget.MAX_REPEATED_LIST)",
    ("narrow", "length"): "a part of the input", ("narrow_copy", "length"): "a part of the input",
    ("split", "split_size"): "parts of the input", ("split", "split_sizes"): "parts of the input",
    ("split_with_sizes", "split_sizes"): "parts of the input",
    ("scalar_tensor", "s"): "the value of the one element", ("triangular_solve", "M"): "a tensor: the matrix",
}


def test_every_allowed_op_has_a_size_rule_or_a_reason_it_is_bounded():
    missing = [op for op in sorted(op_allowlist.ALLOWED) if op_allowlist.size_rule(op) is None and
               len(op_allowlist.BOUNDED_BY_INPUTS.get(op_allowlist.family(op).name, "")) < 30]
    assert not missing, f"allowed ops with neither a size rule nor a bounded family: {missing}"
    assert set(size_rules.RULES) <= op_allowlist.ALLOWED
    sized = {f.name for f in op_allowlist.FAMILIES if f.name not in op_allowlist.BOUNDED_BY_INPUTS}
    assert sized >= {"factories", "amplifiers", "recurrent"}   # their ops all need rules


def test_an_op_with_a_sizing_argument_has_a_rule_or_a_reason():
    problems = []
    for op in sorted(op_allowlist.ALLOWED):
        packet = opnames.aten_packet(op)
        if packet is None or op_allowlist.size_rule(op) is not None:
            continue
        for ov in packet.overloads():
            for a in getattr(packet, ov)._schema.arguments:
                if a.name in SIZING_NAMES and (op, a.name) not in NOT_SIZING and a.name != "out":
                    problems.append(f"aten::{op}.{ov}({a.name}: {a.type})")
    assert not problems, "ops sized by an argument without a size rule:\n" + "\n".join(sorted(set(problems)))


def test_a_newly_allowed_op_without_a_rule_would_fail(monkeypatch):
    """The default-deny test above bites: an op added to a family with no bounded reason fails it."""
    monkeypatch.setattr(op_allowlist, "BOUNDED_BY_INPUTS", {**op_allowlist.BOUNDED_BY_INPUTS, "amplifiers": ""})
    monkeypatch.setitem(size_rules.RULES, "kron", None)
    monkeypatch.delitem(size_rules.RULES, "kron")
    with pytest.raises(AssertionError, match="kron"):
        test_every_allowed_op_has_a_size_rule_or_a_reason_it_is_bounded()


def _rule(op):
    return size_rules.RULES[op]


def _check(op, bound, out, flops=None):
    """The rule counts at least the output's elements (products: exactly) and, given, the work."""
    r = _rule(op)
    n = r.elements(bound)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    assert n >= sum(o.numel() for o in outs), (op, n, [o.shape for o in outs])
    if flops is not None:
        assert r.flops(bound) == flops, (op, r.flops(bound), flops)
    return n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3]), min_size=0, max_size=3), st.lists(st.sampled_from([1, 2, 3]),
       min_size=0, max_size=3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4))
def test_matmul_counts_exactly_the_broadcast_product(batch_a, batch_b, n, k, m):
    a, b = torch.randn(*batch_a, n, k), torch.randn(*batch_b, k, m)
    try:
        out = torch.matmul(a, b)
    except RuntimeError:
        return   # batch shapes eager cannot broadcast
    assert _rule("matmul").elements({"self": a, "other": b}) == out.numel()
    assert _rule("matmul").flops({"self": a, "other": b}) == out.numel() * k


@pytest.mark.parametrize("shapes", [((7,), (7,)), ((5, 7), (7,)), ((7,), (7, 3)), ((2, 1, 5, 7), (4, 7, 3))])
def test_matmul_of_vectors_and_batches(shapes):
    a, b = (torch.randn(*s) for s in shapes)
    assert _rule("matmul").elements({"self": a, "other": b}) == torch.matmul(a, b).numel()


def test_the_other_products_count_what_eager_makes():
    a, b, c = torch.randn(6, 4), torch.randn(4, 9), torch.randn(9, 2)
    x1, x2 = torch.randn(3, 6, 4), torch.randn(3, 4, 9)
    _check("mm", {"self": a, "mat2": b}, a @ b, 6 * 9 * 4)
    _check("bmm", {"self": x1, "mat2": x2}, torch.bmm(x1, x2), 3 * 6 * 9 * 4)
    _check("addmm", {"self": torch.randn(9), "mat1": a, "mat2": b}, torch.addmm(torch.randn(9), a, b), 6 * 9 * 4)
    _check("baddbmm", {"self": torch.randn(1, 9), "batch1": x1, "batch2": x2},
           torch.baddbmm(torch.randn(1, 9), x1, x2), 3 * 6 * 9 * 4)
    assert _check("addbmm", {"self": torch.randn(6, 9), "batch1": x1, "batch2": x2},
                  torch.addbmm(torch.randn(6, 9), x1, x2), 3 * 6 * 9 * 4) == 54
    v1, v2 = torch.randn(300), torch.randn(200)
    assert _check("addr", {"self": torch.randn(1), "vec1": v1, "vec2": v2}, torch.addr(torch.randn(1), v1, v2)) \
        == 60000
    _check("inner", {"self": torch.randn(5, 3, 4), "other": torch.randn(7, 4)},
           torch.inner(torch.randn(5, 3, 4), torch.randn(7, 4)), 5 * 3 * 7 * 4)
    w = torch.randn(11, 4)
    _check("linear", {"input": torch.randn(2, 6, 4), "weight": w}, F.linear(torch.randn(2, 6, 4), w), 2 * 6 * 11 * 4)
    bw = torch.randn(5, 4, 3)
    _check("bilinear", {"input1": torch.randn(6, 4), "input2": torch.randn(6, 3), "weight": bw},
           F.bilinear(torch.randn(6, 4), torch.randn(6, 3), bw), 6 * 5 * 4 * 3)
    t1, t2 = torch.randn(3, 4, 5), torch.randn(4, 5, 6)
    _check("tensordot", {"self": t1, "other": t2, "dims_self": [1, 2], "dims_other": [0, 1]},
           torch.tensordot(t1, t2, ([1, 2], [0, 1])), 3 * 6 * 20)
    _check("linalg_multi_dot", {"tensors": [a, b, c]}, torch.linalg.multi_dot([a, b, c]))
    p1, p2 = torch.randn(2, 50, 3), torch.randn(2, 70, 3)
    _check("cdist", {"x1": p1, "x2": p2}, torch.cdist(p1, p2), 2 * 50 * 70 * 3)
    x, y = torch.randn(8, 5), torch.randn(5, 9)
    _check("einsum", {"equation": "ij,jk->ik", "tensors": [x, y]}, torch.einsum("ij,jk->ik", x, y), 8 * 5 * 9)


def test_ops_sized_by_an_argument_count_what_eager_makes():
    x = torch.randn(2, 3, 10)
    _check("adaptive_avg_pool1d", {"self": x, "output_size": [40]}, F.adaptive_avg_pool1d(x, 40))
    _check("affine_grid_generator", {"theta": torch.randn(2, 2, 3), "size": [2, 3, 7, 9], "align_corners": False},
           F.affine_grid(torch.randn(2, 2, 3), [2, 3, 7, 9], align_corners=False))
    _check("fft_fft", {"self": x, "n": 64}, torch.fft.fft(x, n=64))
    _check("fft_rfftn", {"self": x, "s": [5, 30]}, torch.fft.rfftn(x, s=[5, 30]))
    _check("hann_window", {"window_length": 77}, torch.hann_window(77))
    _check("histc", {"self": x, "bins": 500}, torch.histc(x, 500))
    sig = torch.randn(2, 400)
    _check("stft", {"self": sig, "n_fft": 64, "hop_length": 1, "center": True},
           torch.stft(sig, 64, hop_length=1, return_complex=True))
    _check("unfold", {"self": sig, "dimension": 1, "size": 200, "step": 1}, sig.unfold(1, 200, 1))
    v = torch.randn(90)
    _check("diag", {"self": v, "diagonal": 3}, torch.diag(v, 3))
    _check("diag_embed", {"self": x, "offset": -2}, torch.diag_embed(x, -2))
    _check("diagflat", {"self": x}, torch.diagflat(x))
    w, idx = torch.randn(10, 16), torch.randint(0, 10, (4, 25))
    _check("embedding", {"weight": w, "indices": idx}, F.embedding(idx, w))
    _check("index_select", {"self": w, "dim": 0, "index": idx.flatten()}, w.index_select(0, idx.flatten()))
    _check("index", {"self": w, "indices": [idx]}, w[idx])
    big, mask = torch.randn(300, 200, 5), torch.rand(300, 200) > 0.5   # a mask covers two dimensions
    assert _check("index", {"self": big, "indices": [mask]}, big[mask]) == 300 * 200 * 5
    _check("index", {"self": big, "indices": [None, idx.flatten() % 200]}, big[:, idx.flatten() % 200])
    q, k = torch.randn(2, 3, 40, 8), torch.randn(2, 3, 50, 8)
    _check("scaled_dot_product_attention", {"query": q, "key": k, "value": k}, torch.randn(2, 3, 40, 50),
           2 * 3 * 40 * 50 * 16)
    g = torch.rand(2, 30, 40, 2) * 2 - 1
    img = torch.randn(2, 3, 20, 24)
    _check("max_pool2d", {"self": img, "kernel_size": [3, 5], "stride": [1, 2], "padding": [1, 2]},
           F.max_pool2d(img, [3, 5], [1, 2], [1, 2]), None)
    assert _rule("avg_pool1d").flops({"self": sig[None], "kernel_size": [200], "stride": [1]}) == 2 * 201 * 200
    _check("grid_sampler", {"input": x[:, :, None, :].expand(2, 3, 4, 10), "grid": g},
           F.grid_sample(x[:, :, None, :].expand(2, 3, 4, 10), g, align_corners=False))
    tall = torch.randn(60, 3)
    _check("linalg_svd", {"A": tall, "full_matrices": True}, torch.linalg.svd(tall, full_matrices=True))
    very_tall = torch.empty(10 ** 6, 4, device="meta")   # reduced factors: proportionate, not 10^12
    for op, b in (("linalg_svd", {"A": very_tall, "full_matrices": False}), ("linalg_qr", {"A": very_tall}),
                  ("svd", {"self": very_tall}), ("qr", {"self": very_tall})):
        assert _rule(op).elements(b) <= 3 * very_tall.numel(), op
    assert _rule("linalg_qr").elements({"A": very_tall, "mode": "complete"}) >= 10 ** 12
    assert _check("linalg_qr", {"A": tall, "mode": "reduced"}, torch.linalg.qr(tall)) <= 3 * tall.numel()


def test_a_files_huge_exponent_is_not_computed():
    """combinations counts n^r; a file's r of 2^62 made that a bignum power of ~2 CPU s (found by the op fuzz
    after its int arguments reached keywords): the rule answers "past 2^64" without computing it."""
    import time
    x = torch.randn(3)
    _check("combinations", {"self": x, "r": 3}, torch.combinations(x, 3))
    t0 = time.process_time()
    for r in (65, 2 ** 31, 2 ** 62, 10 ** 18):
        assert _rule("combinations").elements({"self": x, "r": r}) >= 2 ** 64
    assert time.process_time() - t0 < 0.5
    assert _rule("combinations").elements({"self": torch.randn(1), "r": 2 ** 62}) == 2 ** 62   # 1^r: no blow-up


def test_an_expanded_view_does_not_raise_its_own_budget():
    """[1] expanded to [2^24] holds one element: the budget of an op on it stays the file's."""
    one = torch.randn(1)
    big = one.expand(2 ** 24).view(2 ** 24, 1)
    why = call_budget.over_budget(_rule("mm"), {"self": big, "mat2": big.t()}, 2 ** 25)
    assert why is not None and "would allocate 281474976710656 elements" in why
    a, b = torch.randn(512, 64), torch.randn(64, 512)   # real operands: a product of 8 x their elements is fine
    assert call_budget.over_budget(_rule("mm"), {"self": a, "mat2": b}, 2 ** 10) is None


def _roundtrip(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return tracejit.load(io.BytesIO(buf.getvalue()))


@pytest.mark.parametrize("base", ["matmul", "bmm", "linear"])
def test_a_product_sized_from_the_input_runs_like_eager_until_it_would_blow_up(base):
    from catalogue_ops import BASES
    fn = BASES[base][0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = _roundtrip(tracejit.trace(fn, (torch.randn(8),)))
        reference = torch.jit.trace(fn, (torch.randn(8),), check_trace=False)
    for n in (3, 40, 500):   # other lengths: other output shapes, same values as eager and torch.jit.trace
        x = torch.randn(n)
        want = fn(x)
        assert want.numel() != fn(torch.randn(8)).numel()
        torch.testing.assert_close(loaded(x), want)
        torch.testing.assert_close(reference(x), want)
    # 2^13 elements in, 2^28 out: more than 64 x the input and than the file's floor: refused, not allocated
    with pytest.raises(tracejit.BudgetError, match=rf"aten::(matmul|linear) at .*catalogue_ops.py:\d+ would "
                                                   r"allocate 268435456 elements"):
        loaded(torch.randn(2 ** 13))


def test_a_transformer_layer_loaded_from_a_file_is_not_refused_on_longer_inputs():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = _roundtrip(tracejit.trace(layer, (torch.randn(2, 5, 32),)))
        reference = torch.jit.trace(layer, (torch.randn(2, 5, 32),), check_trace=False)
    assert "_tj_budget" in loaded.code   # the products are checked ...
    with torch.no_grad():
        for shape in ((3, 17, 32), (1, 300, 32), (8, 64, 32)):   # ... and pass on other batches and lengths
            x = torch.randn(*shape)
            want = layer(x)
            torch.testing.assert_close(loaded(x), want)
            torch.testing.assert_close(reference(x), want, rtol=1e-4, atol=1e-5)


class _StandardizedConv(nn.Module):
    """transformers' BiT: a weight standardized by a batch norm over a reshaped copy, then ``reshape_as`` the
    weight; the size rule of two tensors (their broadcast) counted [1, C, K] and [C, K', 1, 1] as C^2 K K'."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(256, 64, 1, 1))

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, 256, -1), None, None, training=True, momentum=0.0, eps=1e-8)
        return F.conv2d(x, w.reshape_as(self.weight)) + x.view_as(x).type_as(x)[:, :1]


def test_reshape_as_counts_its_own_elements_so_a_weight_standardized_conv_saves_and_loads():
    model = _StandardizedConv().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = _roundtrip(tracejit.trace(model, (torch.randn(1, 64, 4, 4),)))
    x = torch.randn(2, 64, 7, 5)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    w = torch.randn(256, 64, 1, 1)
    assert _check("reshape_as", {"self": w.reshape(1, 256, -1), "other": w}, w) == w.numel()


class _Widen(nn.Module):
    """A product by a weight of the file, 64 elements out per element in: ``x`` broadcast to n rows."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 64, bias=False)

    def forward(self, x):
        n = x.size(0) * 2
        return self.lin(x[:1].expand(n).view(n, 1))


def test_a_product_by_a_file_weight_is_checked_only_when_its_input_is_big_enough_to_matter():
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = _roundtrip(tracejit.trace(mlp, (torch.randn(3, 16),)))
        widen = tracejit.trace(_Widen().eval(), (torch.randn(8),))
    code = "\n".join(fn.code for m in loaded.modules() for fn in m._traced_methods.values())
    # the full check runs only above a constant (or on an empty input, whose extent counts): ~0.1 us per call
    assert code.count(".numel() <= ") == 2
    x = torch.randn(7, 16)
    torch.testing.assert_close(loaded(x), mlp(x))

    def blow_up(doc):   # n = 2^21 x the input's length: 2^24 rows of one (held) element, 2^30 outputs
        for g in doc["program"]["graphs"]:
            for node in g["nodes"]:
                if node["op"] == "aten::mul.int":
                    node["args"][1] = 2 ** 21
    buf = io.BytesIO()
    tracejit.save(widen, buf)
    from filesurgery import rewrite
    hostile = tracejit.load(io.BytesIO(rewrite(buf.getvalue(), edit_doc=blow_up)))
    small = torch.randn(8)
    torch.testing.assert_close(_roundtrip(widen)(small), widen(small))
    with pytest.raises(tracejit.BudgetError, match=r"aten::linear at .*linear.py:\d+ would allocate "
                                                   r"1073741824 elements"):
        hostile(small)
