"""The op tables the passes used to write by hand are now registry predicates (issue 24 item 2).

Each replaced table is kept here, verbatim, as the reference: the registry's derived answer covers
every op it listed (behaviour does not shrink), and where the derivation reaches further, the extra
ops are shown to be right for the pass that reads the fact (side by side with eager).
"""
import warnings

import pytest
import torch

import tracejit
from tracejit import ops
from tracejit.codegen.inplace import inplace_candidates
from tracejit.ops import overrides
from tracejit.serialize import schema_check

# codegen/inplace.py before the registry: UNARY, SCALAR_BINARY, FRESH
OLD_UNARY = {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "exp", "expm1", "floor", "frac", "log", "log10",
             "log1p", "log2", "neg", "reciprocal", "relu", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt",
             "square", "tan", "tanh", "trunc", "erf", "erfc", "exp2", "sgn"}
OLD_SCALAR_BINARY = {"add", "sub", "mul", "div", "pow", "remainder", "fmod", "clamp", "clamp_min", "clamp_max"}
OLD_FRESH = OLD_UNARY | OLD_SCALAR_BINARY | {
    "linear", "conv1d", "conv2d", "conv3d", "matmul", "mm", "bmm", "addmm", "baddbmm", "softmax", "log_softmax",
    "layer_norm", "group_norm", "gelu", "silu", "mish", "hardtanh", "leaky_relu", "elu", "softplus", "cat", "stack",
    "clone", "sum", "mean", "where", "maximum", "minimum", "atan2", "hypot", "lerp", "addcmul", "addcdiv"}
# trace/recorder.py's _PIECES
OLD_PIECES = {"split", "unbind", "tensor_split", "unsafe_split", "hsplit", "vsplit", "dsplit"}


def test_inplace_twins_cover_the_old_unary_and_scalar_tables():
    for name in OLD_UNARY | OLD_SCALAR_BINARY:
        assert ops.inplace_twin(name) == name + "_", name
        assert ops.inplace_twin(f"aten::{name}") == name + "_", name


@pytest.mark.parametrize("name", ["rand", "bernoulli", "dropout", "view", "positive", "cat", "relu_", "conv2d",
                                  "no_such_op", "mylib::sin"])
def test_no_inplace_twin_for_random_aliasing_twinless_or_unknown_ops(name):
    """Default-deny: a random op (bernoulli_ means another thing), a view, an op without ``op_`` in ATen,
    an in-place op itself, an unknown op."""
    assert ops.inplace_twin(name) is None


def test_fresh_covers_the_old_table_and_denies_aliases():
    assert [n for n in OLD_FRESH if not ops.is_fresh(n)] == []
    # every overload of a family the tags call pointwise (where.ScalarOther carries no tag itself)
    assert ops.is_fresh("aten::where.ScalarOther") and ops.is_fresh("aten::add.Tensor")
    # views, ops returning their input (dropout in eval, contiguous, to), in-place ops, storage sharers, unknown
    for name in ["view", "reshape", "contiguous", "to", "dropout", "add_", "_unsafe_view", "positive", "detach",
                 "type_as", "no_such_op"]:
        assert not ops.is_fresh(name), name


def test_dropout_in_eval_returns_its_input_so_it_is_not_fresh():
    """Why the default-deny matters: an unannotated op may hand back its input."""
    x = torch.randn(3)
    assert torch.ops.aten.dropout(x, 0.5, False) is x
    assert not ops.is_fresh("aten::dropout.default")


def _extra_ops(a):
    y = (a * 3).lgamma()          # lgamma: pointwise with lgamma_, not in the old UNARY
    z = (a * 2).logit(1e-3)       # logit(eps): a pointwise op with a number, not in the old SCALAR_BINARY
    w = torch.mm(a, a.t()).sinc()   # mm's result: fresh by the reviewed override
    return y, z, w


def test_derived_extras_run_in_place_and_match_eager_on_new_inputs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_extra_ops, torch.rand(3, 3))
        reference = torch.jit.trace(_extra_ops, torch.rand(3, 3))
    assert sorted(inplace_candidates(traced.graph).values()) == ["lgamma_", "logit_", "sinc_"]
    for shape in [(3, 3), (5, 5)]:
        a = torch.rand(shape) * 0.3 + 0.01
        assert not torch.equal(_extra_ops(a)[0], _extra_ops(a + 0.1)[0])   # the input moves eager's output
        with torch.no_grad():
            got = traced(a)
        for g, e in zip(got, _extra_ops(a)):
            torch.testing.assert_close(g, e)
        if shape == (3, 3):
            for g, r in zip(got, reference(a)):
                torch.testing.assert_close(g, r)


def test_a_number_argument_of_another_op_keeps_it_out_of_place():
    """A pointwise op whose second operand is a tensor (lerp's end) is not rewritten: only numbers may follow."""
    def f(a, b):
        return (a * 2).lerp(b, 0.5)
    traced = tracejit.trace(f, (torch.rand(4), torch.rand(4)))
    assert ops.inplace_twin("lerp") == "lerp_" and inplace_candidates(traced.graph) == {}
    a, b = torch.rand(5), torch.rand(5)
    with torch.no_grad():
        torch.testing.assert_close(traced(a, b), f(a, b))


def test_pieces_are_the_old_table():
    """The ledger's "the trace fixes the number of pieces": splits into views (the schema) whose call does not
    state the count (chunk's chunks, split_with_sizes' sizes do): exactly the old table."""
    every = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    assert {n for n in every if ops.pieces_follow_size(n)} == OLD_PIECES
    for name in ["chunk", "split_with_sizes", "aten::split.Tensor"]:
        assert ops.splits_into_views(name), name      # views all the same (export's write-back reads this)
    for name in ["cat", "view", "meshgrid", "broadcast_tensors", "where", "no_such_op"]:
        assert not ops.splits_into_views(name), name


def _pieces(x):
    a = torch.stack(x.split(x.size(1))[:2]).sum(0)
    b = torch.stack(x.chunk(x.size(1))[:2]).sum(0)
    return a.sum() + b.sum()


def test_split_by_a_traced_size_is_in_the_ledger_and_chunk_is_not():
    """split(s) makes as many pieces as the size holds s: the trace fixes that number and says so; chunk(n)
    states its count (torch.jit.trace warns of neither; tests/compat checks the warnings match)."""
    x = torch.randn(6, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_pieces, x)
    messages = [e.message for e in traced.ledger if e.kind == "size"]
    assert any("'split' split a tensor into 2 pieces" in m for m in messages)
    assert not any("'chunk'" in m for m in messages)
    y = torch.randn(6, 3)
    torch.testing.assert_close(traced(y), _pieces(y))


# serialize/schema_check.py's NUMBER_OPS and STRING_CHOICES
OLD_NUMBER_OPS = {
    "add", "sub", "mul", "div", "divide", "true_divide", "floor_divide", "remainder", "fmod", "eq", "ne",
    "lt", "le", "gt", "ge", "pow", "float_power", "atan2", "where", "xlogy", "copysign", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "logical_and", "logical_or",
    "logical_xor", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "rsub", "multiply",
    "subtract", "greater", "greater_equal", "less", "less_equal", "not_equal", "hypot", "nextafter",
    "special_xlog1py", "special_zeta", "special_xlogy", "isin", "maximum", "minimum", "fmax", "fmin",
    "heaviside", "ldexp", "lerp", "masked_fill", "index_put", "index_fill", "fill"}


def _numbers_group(reason_word):
    return {name for (name, fact), (_, reason) in overrides.OVERRIDES.items()
            if fact == "numbers_as_tensors" and reason_word in reason}


def test_numbers_for_tensors_is_exactly_the_old_loader_table():
    """The loader's leniency is security-relevant: the registry answers for exactly the ops it accepted."""
    every = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    assert {n for n in every | OLD_NUMBER_OPS if ops.takes_numbers_for_tensors(n)} == OLD_NUMBER_OPS
    assert ops.takes_numbers_for_tensors("aten::add.Tensor") and not ops.takes_numbers_for_tensors("acos")


def test_each_number_entry_has_the_reason_it_gives():
    binding, twin, loader = _numbers_group("python_arg_parser"), _numbers_group("Scalar overload"), \
        _numbers_group("refuses a number")
    assert binding | twin | loader == OLD_NUMBER_OPS and not (binding & twin or binding & loader or twin & loader)
    assert all(torch._C._should_allow_numbers_as_tensors(n) for n in binding)
    assert all(any("calar" in o for o in getattr(torch.ops.aten, n).overloads()) for n in twin)
    x = torch.randn(3)
    for name in loader - {"index_put"}:
        with pytest.raises(TypeError, match="must be Tensor"):
            getattr(torch, name)(x, 2.0)


def test_string_vocabularies_are_the_registrys():
    assert schema_check.STRING_CHOICES is ops.STRING_ARGUMENTS
    assert ops.STRING_ARGUMENTS["rounding_mode"] == {"trunc", "floor"}
    x = torch.randn(3)
    for mode in ops.STRING_ARGUMENTS["rounding_mode"]:
        torch.div(x, 2, rounding_mode=mode)          # every listed value is one eager accepts
    with pytest.raises(RuntimeError):
        torch.div(x, 2, rounding_mode="round")       # and eager refuses one that is not listed


# export/lowering.py's PROMOTING, ACCUMULATING, COMPARING
OLD_PROMOTING = {"add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
                 "maximum", "minimum", "atan2", "where", "masked_fill", "clamp", "lerp", "addcmul", "addcdiv"}
OLD_ACCUMULATING = {"cumsum", "cumprod", "sum", "prod", "mean"}
OLD_COMPARING = {"eq", "ne", "lt", "le", "gt", "ge", "isclose"}


def test_promotion_facts_cover_the_old_lowering_tables():
    assert [n for n in OLD_PROMOTING | OLD_COMPARING if not ops.is_pointwise(n)] == []
    assert [n for n in OLD_ACCUMULATING if not ops.accumulates(n)] == []
    # factories with a dtype= do not read their input's values; neither do ops without one
    for name in ["zeros_like", "new_zeros", "_to_copy", "amax", "argmax", "matmul"]:
        assert not ops.accumulates(name), name
    # a comparison is told by its bool result in the graph: each old one gives bool
    x = torch.randn(3)
    for name in OLD_COMPARING:
        assert getattr(torch, name)(x, x + 1).dtype == torch.bool


def _int_and_float(a, b):
    return torch.sigmoid(a) + torch.xlogy(a, b.abs()) + torch.sqrt(a.abs())


def test_pointwise_ops_beyond_the_old_list_promote_in_onnx(tmp_path):
    """sigmoid / xlogy / sqrt of an int tensor compute in float in torch: their ONNX inputs are cast as well
    (the old list named neither; the export failed ONNX's checker: Sigmoid of int64)."""
    ort = pytest.importorskip("onnxruntime")
    a, b = torch.randint(-5, 5, (3, 4)), torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_int_and_float, (a, b))
    path = tmp_path / "promote.onnx"
    tracejit.export_onnx(traced, str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for shape in [(3, 4), (2, 5)]:
        a2, b2 = torch.randint(-5, 5, shape), torch.randn(shape)
        assert not torch.equal(_int_and_float(a2, b2), _int_and_float(a2 + 1, b2))
        feeds = {session.get_inputs()[0].name: a2.numpy(), session.get_inputs()[1].name: b2.numpy()}
        (got,) = session.run(None, feeds)
        torch.testing.assert_close(torch.from_numpy(got), _int_and_float(a2, b2))


OLD_GROWING = {"expand", "expand_as", "broadcast_to", "repeat", "repeat_interleave", "tile", "new_zeros",
               "new_ones", "new_full", "new_empty", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
               "arange", "eye", "linspace"}


def test_outgrowing_ops_are_the_old_fold_table():
    every = {s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    assert {n for n in every | OLD_GROWING if ops.outgrows_inputs(n)} == OLD_GROWING
    assert ops.outgrows_inputs("aten::expand.default") and not ops.outgrows_inputs("aten::cat.default")


# passes/conv_layout.py's LAYOUT_FREE, _VIEWS and the reductions ("mean", "sum", "size")
OLD_LAYOUT_FREE = {
    "conv2d", "relu", "relu_", "add", "add_", "sub", "mul", "mul_", "div", "max_pool2d", "avg_pool2d",
    "adaptive_avg_pool2d", "adaptive_max_pool2d", "batch_norm", "hardtanh", "hardtanh_", "silu", "silu_",
    "sigmoid", "sigmoid_", "gelu", "clamp", "clamp_", "leaky_relu", "leaky_relu_", "size", "mean", "sum",
    "flatten", "reshape", "contiguous", "dropout", "hardswish", "hardswish_", "hardsigmoid", "tanh",
    "pad", "constant_pad_nd", "reflection_pad2d", "replication_pad2d"}
OLD_VIEWS = {"size", "flatten", "reshape", "contiguous", "dropout"}


def test_layout_facts_cover_the_old_conv_layout_tables():
    assert [n for n in OLD_LAYOUT_FREE if not ops.is_layout_free(n)] == []
    # the outputs the pass may return through .contiguous(): the old rule, exactly, over the old names
    old_fixable = {n for n in OLD_LAYOUT_FREE if n not in OLD_VIEWS and not n.endswith("_")}
    assert {n for n in OLD_LAYOUT_FREE if ops.is_layout_free(n) and ops.is_fresh(n)} == old_fixable
    assert ops.is_reduction("mean") and ops.is_reduction("sum") and not ops.gives_tensor("size")
    # random pointwise ops draw in memory order: not layout-free (default-deny); views read strides
    for name in ["rrelu", "bernoulli", "view", "as_strided", "stride", "no_such_op"]:
        assert not ops.is_layout_free(name), name


class _ConvAct(torch.nn.Module):
    """A conv net whose activations the old LAYOUT_FREE did not list (elu, abs, where, amax)."""

    def __init__(self, act):
        super().__init__()
        torch.manual_seed(0)
        self.c1, self.c2, self.act = torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.Conv2d(6, 6, 3, padding=1), act

    def forward(self, x):
        h = self.act(self.c1(x))
        return self.c2(h).amax(dim=(2, 3))


@pytest.mark.parametrize("act, applied", [
    (torch.nn.functional.elu, True),
    # the condition is not made from h: a threshold on what the conv computed would be a
    # decision (passes/decisions.py), which keeps eager's arithmetic and so its layout
    (lambda h: torch.where(torch.ones((), dtype=torch.bool), h, h.abs() * 0.1), True),
    (lambda h: torch.nn.functional.rrelu(h, training=False), False),   # rrelu is random: left as it was
])
def test_conv_layout_reaches_pointwise_ops_the_old_list_missed(act, applied):
    from tracejit.passes.conv_layout import channels_last_weights
    m = _ConvAct(act).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            fast = tracejit.optimize_for_inference(tracejit.trace(m, torch.randn(1, 3, 8, 8)))
    assert (channels_last_weights(fast.graph) == 2) == applied
    for shape in [(1, 3, 8, 8), (2, 3, 10, 12)]:
        x = torch.randn(shape)
        assert not torch.equal(m(x), m(x * 2))
        with torch.no_grad():
            torch.testing.assert_close(fast(x), m(x), rtol=1e-4, atol=1e-5)


# export/lowering.py's VIEW_OPS and export/view_writes.py's RESHAPING / INVERTIBLE
OLD_VIEW_OPS = {"view", "reshape", "select", "slice", "transpose", "permute", "expand", "expand_as", "unsqueeze",
                "squeeze", "as_strided", "narrow", "t", "unflatten", "flatten", "diagonal", "alias", "detach", "chunk",
                "split", "unbind", "view_as", "unfold", "movedim", "swapaxes", "mT", "numpy_T", "real", "imag"}
OLD_INVERTIBLE = {"view", "reshape", "flatten", "unflatten", "view_as", "reshape_as", "unsqueeze", "squeeze",
                  "alias", "detach", "slice", "narrow", "select", "transpose", "swapaxes", "t", "mT", "numpy_T",
                  "permute"}


def test_shared_memory_covers_the_old_export_view_table():
    assert [n for n in OLD_VIEW_OPS if not ops.shares_memory(n)] == []
    for name in ["add", "clone", "cat", "mm", "_unsafe_view", "no_such_op"]:
        assert not ops.shares_memory(name), name
    # views the old table missed: a write through them was not seen by their base (a wrong result)
    for name in ["swapdims", "moveaxis", "broadcast_to", "tensor_split", "hsplit", "contiguous"]:
        assert ops.shares_memory(name), name


def test_write_back_implements_the_old_invertible_views():
    from tracejit.export import view_writes
    # swapdims; to (a same-dtype, same-device to() is the tensor itself: Informer's write through it, 8e84816)
    assert set(view_writes._INVERSES) == OLD_INVERTIBLE | {"swapdims", "to"}
    assert all(ops.shares_memory(n) for n in view_writes._INVERSES)


def _write_through_swapdims(x):
    y = x * 2
    y.swapdims(0, 1)[1:].add_(1)      # swapdims: a view of y (the old table missed it: y came out unwritten)
    return y


def _write_through_broadcast(x):
    y = x * 2
    z = y.broadcast_to(2, *y.shape)   # a view of y, that has no inverse in ONNX
    y.add_(1)
    return z.sum(0)


def _write_after_a_conversion(x):
    y = x * 2
    z = y.to(torch.float64)           # to() may alias (schema), but another dtype is always a copy
    w = y.to(torch.float32)           # the same dtype: y itself, which the write below changes
    y.add_(1)
    return z, w * 1


def test_a_conversion_to_another_dtype_is_a_copy_and_the_same_dtype_a_view(tmp_path):
    """Eager: z keeps y's old values, w is y. The export writes z out as a copy, and refuses w (a view made
    before the write and read after it) rather than give its stale value."""
    x = torch.randn(3)
    z, w = _write_after_a_conversion(x)
    torch.testing.assert_close(z, (x * 2).double())
    torch.testing.assert_close(w, x * 2 + 1)

    def only_copy(x):
        return _write_after_a_conversion(x)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced_copy, traced_view = tracejit.trace(only_copy, x), tracejit.trace(_write_after_a_conversion, x)
    ort = pytest.importorskip("onnxruntime")
    tracejit.export_onnx(traced_copy, str(tmp_path / "copy.onnx"))
    session = ort.InferenceSession(str(tmp_path / "copy.onnx"), providers=["CPUExecutionProvider"])
    x2 = torch.randn(3)
    (got,) = session.run(None, {session.get_inputs()[0].name: x2.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), only_copy(x2))
    with pytest.raises(tracejit.ExportError, match="another view of the written tensor"):
        tracejit.export_onnx(traced_view, str(tmp_path / "view.onnx"))


def test_writes_through_views_the_old_table_missed_export_right_or_refuse(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(_write_through_swapdims, torch.randn(3, 4))
        refused = tracejit.trace(_write_through_broadcast, torch.randn(3, 4))
    path = tmp_path / "swapdims.onnx"
    tracejit.export_onnx(traced, str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 4)
    assert not torch.equal(_write_through_swapdims(x), _write_through_swapdims(x + 1))
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), _write_through_swapdims(x))
    # z, a view made before the write and read after it, would be stale in ONNX: refused, naming the op
    with pytest.raises(tracejit.ExportError, match="another view of the written tensor"):
        tracejit.export_onnx(refused, str(tmp_path / "broadcast.onnx"))
