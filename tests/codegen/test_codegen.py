"""Codegen: `.code` is the Python source that runs; it unpacks nested inputs, names parameters after
the traced callable's, and spells plain Python constants inline.
"""
from __future__ import annotations

import ast
import collections
import linecache
import re
import traceback

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tracejit
from tracejit.codegen.python import compile_function, generate
from tracejit.ir import Graph, Node, TensorType

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _tracejit_frames(exc: BaseException):
    """(filename, lineno, source line) of each generated-code frame of ``exc``'s traceback."""
    out = []
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        fname = frame.f_code.co_filename
        if fname.startswith("<tracejit"):
            out.append((fname, lineno, linecache.getline(fname, lineno)))
    return out


def _fn_def(code: str) -> ast.FunctionDef:
    tree = ast.parse(code)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(defs) == 1, code
    return defs[0]


def _param_names(code: str) -> list[str]:
    return [a.arg for a in _fn_def(code).args.args]


# --------------------------------------------------------------------------------------------------
# the generated code is what runs


def double_then_view(x):
    y = x * 2
    z = y.view(3, 4)
    return z + 1


def test_traceback_from_traced_function_points_into_generated_view_line():
    traced = tracejit.trace(double_then_view, torch.randn(12))
    x = torch.randn(12)
    torch.testing.assert_close(traced(x), double_then_view(x))
    with pytest.raises(RuntimeError) as info:
        traced(torch.randn(10))  # same rank, so no guard fires: view itself fails
    frames = _tracejit_frames(info.value)
    assert frames, "no frame of generated code in the traceback"
    fname, lineno, line = frames[-1]
    assert "view" in line and "(3, 4)" in line, line
    # the file the frame runs is exactly `.code`
    assert "".join(linecache.getlines(fname)) == traced.code
    assert traced.code.splitlines()[lineno - 1] == line.rstrip("\n")


class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)

    def forward(self, x):
        return self.proj(x.relu())


def test_traceback_from_traced_submodule_points_into_its_generated_code():
    traced = tracejit.trace(_Head().eval(), torch.randn(2, 4))
    with pytest.raises(RuntimeError) as info:
        traced(torch.randn(2, 5))  # wrong in-features: fails in the submodule's linear
    frames = _tracejit_frames(info.value)
    assert len(frames) >= 2  # the root's frame and the submodule's frame
    fname, lineno, line = frames[-1]
    assert "linear" in line, line
    assert "".join(linecache.getlines(fname)) == traced.proj.code
    assert "proj" in frames[0][2]  # the root's line calls the submodule


def test_code_of_function_compiles_and_defines_forward():
    traced = tracejit.trace(double_then_view, torch.randn(12))
    code = compile(traced.code, "<test>", "exec")
    assert code is not None
    assert _fn_def(traced.code).name == "forward"
    assert _param_names(traced.code) == ["self", "x"]


def test_code_of_module_method_compiles_and_is_named_after_the_method():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 1, 3)

        def forward(self, x):
            return self.conv(x)

        def weighted_kernel_sum(self, weight):
            return weight * self.conv.weight

    traced = tracejit.trace_module(Net(), {"forward": torch.rand(1, 1, 3, 3),
                                           "weighted_kernel_sum": torch.rand(1, 1, 3, 3)})
    compile(traced.code, "<test>", "exec")
    assert _fn_def(traced.code).name == "forward"
    src = traced.weighted_kernel_sum.code
    compile(src, "<test>", "exec")
    assert _fn_def(src).name == "weighted_kernel_sum"
    assert _param_names(src) == ["self", "weight"]


def test_executing_code_text_reproduces_the_traced_module():
    """Compiling `.code` ourselves with the method's globals gives the traced method back."""
    model = _Head().eval()
    traced = tracejit.trace(model, torch.randn(2, 4))
    fn = traced.forward.__func__
    assert fn.__code__.co_filename.startswith("<tracejit")
    assert "".join(linecache.getlines(fn.__code__.co_filename)) == traced.code
    ns = dict(fn.__globals__)
    exec(compile(traced.code, "<test-copy>", "exec"), ns)
    x = torch.randn(5, 4)
    torch.testing.assert_close(ns["forward"](traced, x), model(x))
    torch.testing.assert_close(traced(x), model(x))
    assert not torch.allclose(traced(x), traced(x + 1))


class _Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)

    def forward(self, images, mask):
        h = self.norm(self.conv(images)) * mask
        return self.fc(h.mean((2, 3)))


def _calls_submodule(code: str, name: str) -> bool:
    pattern = rf"self(\.{name}|\._modules\[['\"]{name}['\"]\]|getattr\(self, ['\"]{name}['\"]\))\.forward\("
    return re.search(pattern, code) is not None


def test_module_code_calls_submodules_and_submodule_code_holds_their_ops():
    model = _Encoder().eval()
    traced = tracejit.trace(model, (torch.randn(2, 3, 5, 5), torch.rand(2, 1, 5, 5)))
    for name in ("conv", "norm", "fc"):
        assert _calls_submodule(traced.code, name), traced.code
    assert "conv2d(" in traced.conv.code
    assert "batch_norm(" in traced.norm.code
    assert "linear(" in traced.fc.code
    for sub in (traced.conv, traced.norm, traced.fc):
        compile(sub.code, "<test>", "exec")
        assert _fn_def(sub.code).name == "forward"
    # ops of the submodules are not inlined into the root's code
    assert "conv2d(" not in traced.code and "linear(" not in traced.code
    x, m = torch.randn(3, 3, 7, 7), torch.rand(3, 1, 7, 7)
    torch.testing.assert_close(traced(x, m), model(x, m))
    assert not torch.allclose(traced(x, m), traced(x, m * 0))


# --------------------------------------------------------------------------------------------------
# signature: parameter names and nested inputs


def test_generated_parameters_are_named_after_the_traced_callables_parameters():
    traced = tracejit.trace(_Encoder().eval(), (torch.randn(1, 3, 4, 4), torch.rand(1, 1, 4, 4)))
    assert _param_names(traced.code) == ["self", "images", "mask"]
    assert re.search(r"def forward\(self, images, mask\):", traced.code)

    def blend(foreground, background, alpha):
        return foreground * alpha + background * (1 - alpha)

    tf = tracejit.trace(blend, (torch.randn(3), torch.randn(3), torch.rand(3)))
    assert _param_names(tf.code) == ["self", "foreground", "background", "alpha"]
    # and the caller may use those names as keywords
    f, b, a = torch.randn(4), torch.randn(4), torch.rand(4)
    torch.testing.assert_close(tf(background=b, foreground=f, alpha=a), blend(f, b, a))


def nested(pair, group):
    a, (b, c) = pair
    first, second = group
    return a * b + c - first * second.sum()


def test_nested_tuple_and_list_inputs_are_unpacked():
    example = ((torch.randn(3), (torch.randn(3), torch.randn(3))), [torch.randn(3), torch.randn(2)])
    traced = tracejit.trace(nested, example)
    assert _param_names(traced.code) == ["self", "pair", "group"]
    body = traced.code
    assert re.search(r"\bpair\[0\]", body) and re.search(r"\bpair\[1\]", body)
    assert re.search(r"\bgroup\[0\]", body) and re.search(r"\bgroup\[1\]", body)
    new = ((torch.randn(5), (torch.randn(5), torch.randn(5))), [torch.randn(5), torch.randn(7)])
    torch.testing.assert_close(traced(*new), nested(*new))
    moved = ((new[0][0], (new[0][1][0], new[0][1][1] + 1)), new[1])
    assert not torch.allclose(traced(*moved), traced(*new))


def with_dict(x, feats):
    return x * feats["scale"] + feats["shifts"][1]


def test_nested_dict_inputs_are_unpacked():
    example = (torch.randn(3), {"scale": torch.randn(3), "shifts": [torch.randn(3), torch.randn(3)]})
    traced = tracejit.trace(with_dict, example)
    assert _param_names(traced.code) == ["self", "x", "feats"]
    assert re.search(r"\bfeats\[['\"]scale['\"]\]", traced.code)
    assert re.search(r"\bfeats\[['\"]shifts['\"]\]", traced.code)
    new = (torch.randn(4), {"scale": torch.randn(4), "shifts": [torch.randn(4), torch.randn(4)]})
    torch.testing.assert_close(traced(*new), with_dict(*new))
    other = (new[0], {"scale": new[1]["scale"], "shifts": [new[1]["shifts"][0], new[1]["shifts"][1] + 1]})
    assert not torch.allclose(traced(*other), traced(*new))


Pair = collections.namedtuple("Pair", "left right")


def test_namedtuple_input_and_output_round_trip():
    def swap(p):
        return Pair(p.right * 2, p.left + 1)

    traced = tracejit.trace(swap, (Pair(torch.randn(2), torch.randn(2)),))
    assert _param_names(traced.code) == ["self", "p"]
    p = Pair(torch.randn(5), torch.randn(5))
    out = traced(p)
    assert isinstance(out, Pair)
    torch.testing.assert_close(tuple(out), tuple(swap(p)))
    assert not torch.allclose(traced(Pair(p.left, p.right + 1)).left, out.left)


# --------------------------------------------------------------------------------------------------
# pretty code


def scalars(x, y):
    a = x.view(2, -1).transpose(0, 1) * 0.5
    b = a.clamp(min=-1.0, max=2).pow(2) + 3
    c = b.sum(dim=1, keepdim=True) / 7
    d = y.masked_fill(y > 0, float("-inf")).softmax(-1)
    return c - 1, d.reshape(-1)[1:5:2], torch.cat([x, y], dim=0).to(torch.float64)


def test_plain_int_and_float_arguments_are_inline_literals():
    traced = tracejit.trace(scalars, (torch.randn(4, 3), torch.randn(4, 3)))
    code = traced.code
    assert not re.search(r"\b_k\d+\b", code), code
    for pattern in (r"\b2, -1\b", r"\b0\.5\b", r"-1\.0\b", r"\b7\b", r"float\(['\"]-inf['\"]\)",
                    r"torch\.float64", r"\b1:5:2\b"):
        assert re.search(pattern, code), (pattern, code)
    compile(code, "<test>", "exec")
    x, y = torch.randn(2, 6), torch.randn(2, 6)
    for got, want in zip(traced(x, y), scalars(x, y)):
        torch.testing.assert_close(got, want)
    assert not torch.allclose(traced(x, y)[0], traced(x + 1, y)[0])


def test_module_code_has_no_global_constants_for_layer_hyperparameters():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.LayerNorm([4, 3, 3]),
                          nn.LeakyReLU(0.2), nn.Flatten(), nn.Dropout(0.1)).eval()
    traced = tracejit.trace(model, torch.randn(1, 3, 6, 6))
    for path, m in traced.named_modules():
        for name, fn in m._traced_methods.items():
            assert not re.search(r"\b_k\d+\b", fn.code), (path, fn.code)
    x = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(traced(x), model(x))
    assert not torch.allclose(traced(x), traced(x.flip(0)))


# --------------------------------------------------------------------------------------------------
# generate / compile_function on a hand-built graph


def test_generate_and_compile_function_on_a_hand_built_graph():
    example = (torch.randn(3), torch.randn(3))
    base = tracejit.trace(lambda a, b: a + b, example).graph  # for its input spec
    g = Graph(name="forward", in_spec=base.in_spec, arg_names=base.arg_names, param_names=base.param_names,
              out_spec=base.out_spec)
    t = TensorType(torch.float32, (3,), "cpu")
    a, b = g.add_input(t, hint="a"), g.add_input(t, hint="b")
    g.input_leaves = [a, b]
    mul = g.add_node(Node("aten::mul.Tensor", "method:mul", (a, b)), [t])
    neg = g.add_node(Node("aten::neg.default", "op:u-", (mul.outputs[0],)), [t])
    g.outputs = [neg.outputs[0]]
    src, globs = generate(g, "forward")
    assert _fn_def(src).name == "forward" and _param_names(src) == ["self", "a", "b"]
    fn = compile_function(src, "forward", globs, "handmade")
    fname = fn.__code__.co_filename
    assert fname.startswith("<tracejit")
    assert "".join(linecache.getlines(fname)) == src
    x, y = torch.randn(6), torch.randn(6)
    torch.testing.assert_close(fn(None, x, y), -(x * y))
    assert not torch.allclose(fn(None, x, y), fn(None, x, y + 1))


# --------------------------------------------------------------------------------------------------
# under no_grad the code may reuse dead intermediates in place; it must never change results or inputs


def _views_and_reuse(x, y):
    v = x.view(-1) + 1               # a view of an input
    a = x * 2
    b = a + 1                         # a is still returned
    s = x.sum(1, keepdim=True) + y    # broadcasting grows the result
    i = (x > 0).long() * 1 + 0.5      # dtype promotion
    e = x[:, :1].expand(4, 4) + 1     # expanded input
    return v, a, b, s, i, e, x.t() * 3, x[0] + 1


@pytest.mark.parametrize("grad", [True, False])
def test_outputs_and_inputs_unchanged_with_and_without_grad(grad):
    traced = tracejit.trace(_views_and_reuse, (torch.randn(4, 4), torch.randn(4, 4)))
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    xc, yc = x.clone(), y.clone()
    with torch.set_grad_enabled(grad):
        got = traced(x, y)
    assert torch.equal(x, xc) and torch.equal(y, yc), "the traced program mutated its inputs"
    want = _views_and_reuse(xc, yc)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert not torch.allclose(traced(x + 1, y)[1], got[1])


# --------------------------------------------------------------------------------------------------
# bugs


def uses_constant_named_like_a_global(_k2, x):
    return _k2 + x * _CONST


_CONST = torch.randn(3)


def test_parameter_names_do_not_shadow_generated_globals():
    traced = tracejit.trace(uses_constant_named_like_a_global, (torch.randn(3), torch.randn(3)))
    a, x = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(traced(a, x), uses_constant_named_like_a_global(a, x))


def _mse(x, y):
    return F.mse_loss(x, y)


def _cdist(x, y):
    return torch.cdist(x, y)


def _tensordot(x, y):
    return torch.tensordot(x, y.t(), dims=1)


def _block_diag(x, y):
    return torch.block_diag(x, y)


def _cartesian(x, y):
    return torch.cartesian_prod(x[0], y[0])


@pytest.mark.parametrize("fn, rows", [(_mse, (3, 3)), (_cdist, (3, 5)), (_tensordot, (3, 5)),
                                      (_block_diag, (3, 5)), (_cartesian, (3, 5))])
def test_ops_behind_torch_functional_wrappers_run(fn, rows):
    traced = tracejit.trace(fn, (torch.randn(rows[0], 4), torch.randn(rows[1], 4)))
    x, y = torch.randn(rows[0] + 1, 4), torch.randn(rows[1] + 1, 4)
    if fn is _mse:
        y = y[: x.size(0)]
    torch.testing.assert_close(traced(x, y), fn(x, y))
    assert not torch.allclose(traced(x, y), traced(x, y * 2))
