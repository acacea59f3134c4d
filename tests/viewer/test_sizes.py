"""Symbolic sizes by name in the viewer (tracejit/viewer/sizes.py): the inputs carry inspect's names
(the same shared rule, ir/symbolic_dims.py; input sizes that move with them are named too), every
value inside the graphs is named after the sizes it follows, and what the names claim holds when
the program runs on other sizes."""
from __future__ import annotations

import importlib.util
import io
import re
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.cli.inspect import signature
from tracejit.viewer import program_document, render_html
from tracejit.viewer.sizes import name_dim


class Flatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 5)

    def forward(self, x):              # x: (batch, time, 8)
        b, t = x.size(0), x.size(1)
        rows = x.reshape(b * t, 8)     # (s0*s1, 8)
        out = self.lin(rows)           # a submodule: its input and output are named too
        pos = torch.arange(t + 1)      # (s1+1,)
        half = x[:, : t // 2]          # (s0, s1//2, 8)
        return out.view(b, t, 5), pos, half


def _trace(model, *inputs, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(model, inputs, **options)


def _types(doc, key):
    return [n["type"] for n in doc["graphs"][key]["nodes"]]


def _evaluate(dim: str, env: dict) -> int:
    """A name like ``s0*s1`` or ``s1//2+1`` evaluated for the symbols' sizes in ``env``."""
    assert re.fullmatch(r"[s0-9*/+\- ]+", dim), dim
    return eval(re.sub(r"s(\d+)", lambda m: str(env[f"s{m.group(1)}"]), dim))  # noqa: S307 - checked above


def test_values_are_named_after_the_sizes_they_follow():
    model = Flatten()
    traced = _trace(model, torch.randn(2, 6, 8))
    doc = program_document(traced)
    root = doc["graphs"][":forward"]["nodes"]
    assert root[0]["type"] == "Float[s0, s1, 8]"
    outputs = [n["type"] for n in root if n["kind"] == "output"]
    assert outputs == ["Float[s0, s1, 5]", "Long[s1+1]", "Float[s0, s1//2, 8]"]
    assert "Float[s0*s1, 8]" in _types(doc, ":forward")
    lin = _types(doc, "lin:forward")
    assert lin[0] == "Float[s0*s1, 8]" and "Float[s0*s1, 5]" in lin and "Float[5, 8]" in lin   # the weight: fixed
    assert doc["sizes"].startswith("s0, s1, ...: input sizes the program accepts other values of")
    # the input names are exactly inspect's
    assert signature("forward", traced.graph) == "forward(x: Float[s0, s1, 8])"
    # what the names say holds on other sizes: the traced program's and eager's outputs have those shapes
    for b, t in ((3, 9), (1, 4), (5, 13)):
        x = torch.randn(b, t, 8)
        got, expected = traced(x), model(x)
        for out, want, text in zip(got, expected, outputs):
            dims = text[text.index("[") + 1:-1].split(", ")
            assert list(out.shape) == list(want.shape) == [_evaluate(d, {"s0": b, "s1": t}) for d in dims]
            torch.testing.assert_close(out, want)


def test_pinned_sizes_stay_numbers_and_unread_ones_are_probed():
    class Pinned(nn.Module):
        def forward(self, x, y):
            n = x.size(0)                  # x's batch is read; y's sizes never are
            if x.size(1) == 4:             # a guard pins x's second size
                x = x * 2
            return x.sum(1).repeat(n), y + 1

    traced = _trace(Pinned(), torch.randn(3, 4), torch.randn(5, 7))
    types = _types(program_document(traced), ":forward")
    # x's second size is pinned by a guard; y's, which nothing reads, move in the probe: names of their own
    assert types[:2] == ["Float[s0, 4]", "Float[s1, s2]"]
    assert "Float[s0*s0]" in types and types[-1] == "Float[s1, s2]"
    x, y = torch.randn(6, 4), torch.randn(2, 9)     # what the names claim holds
    torch.testing.assert_close(traced(x, y), Pinned()(x, y))
    with pytest.raises(tracejit.GuardError):         # and the pinned size is a number for a reason
        traced.forward(torch.randn(6, 5), y)
    # an input size equal to a symbolic one in the example is probed too: y's batch, which nothing ties
    # to x's, gets a name of its own
    doc = program_document(_trace(Pinned(), torch.randn(3, 4), torch.randn(3, 7)))
    assert _types(doc, ":forward")[:2] == ["Float[s0, 4]", "Float[s1, s2]"]
    assert _types(doc, ":forward")[-1] == "Float[s1, s2]"


def test_an_unread_size_the_program_accepts_is_named_one_it_fixes_is_not():
    lin = nn.Linear(4, 2)
    traced = _trace(lin, torch.randn(3, 4))
    doc = program_document(traced)         # nothing reads the batch; the weight fixes the features
    assert _types(doc, ":forward")[0] == "Float[s0, 4]" and "Float[s0, 2]" in _types(doc, ":forward")
    assert doc["sizes"] != ""
    x = torch.randn(7, 4)
    torch.testing.assert_close(traced(x), lin(x))


def test_no_size_the_program_accepts_no_names_no_note():
    doc = program_document(_trace(lambda x: x.reshape(12) * 2, torch.randn(3, 4)))   # a reshape to a constant
    assert _types(doc, ":forward") == ["Float[3, 4]", "Float[12]", "Float[12]", "Float[12]"]
    assert doc["sizes"] == ""


def test_a_probe_the_meta_device_cannot_run_keeps_inspects_input_names():
    class ValueGuard(nn.Module):
        def forward(self, x):
            n = x.size(0)
            if x.sum() > -1e9:             # a value guard: reading data, which the meta device has not
                return x.reshape(n, -1) * 2
            return x

    doc = program_document(_trace(ValueGuard(), torch.randn(2, 3, 4)))
    types = _types(doc, ":forward")
    assert types[0] == "Float[s0, 3, 4]" and "Float[2, 12]" in types


def test_the_traced_object_is_neither_called_nor_changed():
    model = Flatten()
    traced = _trace(model, torch.randn(2, 6, 8))
    calls = []
    model.register_forward_hook(lambda *a: calls.append(a))
    before = {k: v.clone() for k, v in traced.state_dict().items()}
    code = traced.code
    program_document(traced)
    assert calls == [] and traced.code == code
    assert all(torch.equal(before[k], v) and v.device.type == "cpu" for k, v in traced.state_dict().items())
    # and a program loaded on the meta device gets the same names
    import io
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    assert _types(program_document(tracejit.load(buf, map_location="meta")), ":forward") == \
        _types(program_document(traced), ":forward")


def test_the_page_carries_the_names():
    html = render_html(program_document(_trace(Flatten(), torch.randn(2, 6, 8))))
    assert "Float[s0*s1, 8]" in html and 'id="sizes"' in html


@pytest.mark.parametrize("triple,name", [
    ((8, 9, 11), "s1"), ((2, 3, 4), "s0"), ((16, 27, 44), "s0*s1"), ((17, 19, 23), "2*s1+1"),
    ((4, 4, 5), "s1//2"), ((5, 5, 5), "5"), ((3, 50, 7), "?"), ((6, 4, 2), "-2*s0+10"),
])
def test_name_dim(triple, name):
    symbols = [("s0", 2, 3, 4), ("s1", 8, 9, 11)]
    assert name_dim(triple, symbols) == name


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers (test extras)")
def test_bert_sizes_by_name():
    import transformers
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (2, 8))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(transformers.BertModel(cfg).eval(),
                                example_kwarg_inputs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                strict=False)
    doc = program_document(traced)
    assert _types(doc, ":forward")[:2] == ["Long[s0, s1]", "Long[s0, s1]"]   # the mask moves with the ids
    assert _types(doc, "embeddings.word_embeddings:forward")[:3] == ["Long[s0, s1]", "Float[100, 32]",
                                                                     "Float[s0, s1, 32]"]
    attention = " ".join(t for k in doc["graphs"] if "attention" in k for t in _types(doc, k))
    assert "Float[s0, 4, s1, 8]" in attention   # (batch, heads, seq, head size)


def test_a_custom_autograd_function_is_not_run_by_the_probe():
    calls = []

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            calls.append(x.device.type)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class UsesFunction(nn.Module):
        def forward(self, x):
            return Double.apply(x).reshape(x.size(0), -1)

    # the spy list is state the program does not replay (trace/outer_state.py): accepted here
    traced = _trace(UsesFunction(), torch.randn(2, 3, 4), allow_frozen_python_state=True)
    calls.clear()
    types = _types(program_document(traced), ":forward")
    assert calls == [] and types[0] == "Float[s0, 3, 4]" and "Float[2, 12]" in types


def test_sizes_read_inside_a_submodule_are_symbolic_for_inspect_and_the_viewer():
    class Inner(nn.Module):
        def forward(self, x):
            n = x.size(0)                  # the batch, read inside the callee
            if x.size(2) == 4:             # pinned inside the callee
                x = x + 1
            return x.view(n, -1)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x) * 2

    model = Outer()
    traced = _trace(model, torch.randn(2, 3, 4))
    assert signature("forward", traced.graph) == "forward(x: Float[s0, 3, 4])"   # the sizes the graphs read
    doc = program_document(traced)   # the probe also moves the unread 3: view(n, -1) takes any
    assert _types(doc, "inner:forward")[0] == "Float[s0, s1, 4]" and _types(doc, ":forward")[-1] == "Float[s0, 4*s1]"
    for x in (torch.randn(5, 3, 4), torch.randn(5, 6, 4)):
        torch.testing.assert_close(traced(x), model(x))


def test_a_function_and_an_input_tied_to_a_symbolic_size():
    def f(x, y):                           # y's length must equal x's batch: it moves with s0
        return x.reshape(x.size(0) * x.size(1)) + y.repeat(x.size(1))

    traced = _trace(f, torch.randn(2, 3), torch.randn(2))
    types = _types(program_document(traced), ":forward")
    assert types[:2] == ["Float[s0, s1]", "Float[s0]"] and types[-1] == "Float[s0*s1]"
    x, y = torch.randn(4, 5), torch.randn(4)
    torch.testing.assert_close(traced(x, y), f(x, y))
    assert traced(x, y).shape == (4 * 5,)


def test_inspect_names_input_sizes_as_the_viewer_does(tmp_path, capsys):
    """An input whose sizes move with a symbolic one (a mask next to its ids) is named in ``tracejit
    inspect`` too (it showed the example's numbers), by the same code as the viewer."""
    from tracejit import cli

    class Masked(nn.Module):
        def forward(self, ids, mask):
            n = ids.size(1)                           # only the ids' sizes are read
            return (ids * mask).sum(1) / n

    traced = _trace(Masked(), torch.randn(2, 8), torch.ones(2, 8))
    for x, m in [(torch.randn(5, 3), torch.ones(5, 3)), (torch.randn(1, 11), torch.zeros(1, 11))]:
        torch.testing.assert_close(traced(x, m), Masked()(x, m))   # the mask accepts any size the ids take
    path = tmp_path / "masked.tjit"
    tracejit.save(traced, path)
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "forward(ids: Float[2, s0], mask: Float[2, s0])" in out
    assert signature("forward", traced.graph) == "forward(ids: Float[2, s0], mask: Float[2, 8])"   # no probe


class _Twice(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.c = inner

    def forward(self, x):
        return self.c(self.c(x)) * 2


def test_a_submodule_called_again_with_the_same_shapes_is_probed_once(monkeypatch):
    """Eight levels of modules calling the next twice are 256 runs of the innermost: the probe runs each
    module once per distinct input shapes (the names are the same as running them all; inspect of this
    file took ~1 CPU second, past 2 under load)."""
    from tracejit.viewer import sizes
    model = nn.ReLU()
    for _ in range(8):
        model = _Twice(model)
    traced = _trace(model.eval(), torch.randn(3, 4))
    ops = []
    original = sizes._MetaOnly.__torch_dispatch__
    monkeypatch.setattr(sizes._MetaOnly, "__torch_dispatch__",
                        lambda self, func, *a, **k: (ops.append(func), original(self, func, *a, **k))[1])
    doc = program_document(traced)
    relus = sum("relu" in str(op) for op in ops)
    assert 0 < relus <= 5 * 2, relus   # at most one relu per probe run (5 probe runs at most), not 256
    assert doc["graphs"][":forward"]["nodes"][0]["type"] == "Float[s0, s1]"
    assert "Float[s0, s1]" in _types(doc, "c.c.c.c.c.c.c.c:forward")
    for shape in ((5, 7), (1, 2)):   # the names hold on other sizes
        x = torch.randn(*shape)
        torch.testing.assert_close(traced(x), model(x))


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        return self.inner(x) * x.size(0)


def test_a_graph_bound_to_many_methods_is_scanned_once(monkeypatch):
    """A file may bind one graph to many method names (tests/security/catalogue_tools.py: 190 methods of a
    1,000-node graph). The probe asks whether a graph may write in place once per graph, not once per method
    and shadow: 380,000 node scans made inspect of that file 1.3 CPU seconds, 1.9 under load (limit 2.0)."""
    import filesurgery
    from tracejit.viewer import sizes
    model = _Outer().eval()
    raw = io.BytesIO()
    tracejit.save(_trace(model, torch.randn(3, 4)), raw)

    def many_methods(doc):
        inner = next(m for m in doc["program"]["modules"] if m["path"] == "inner")
        graph = next(g for name, g in inner["methods"] if name == "forward")
        inner["methods"] += [[f"m{i}", graph] for i in range(100)]
    loaded = tracejit.load(io.BytesIO(filesurgery.rewrite(raw.getvalue(), edit_doc=many_methods)))
    scans = []
    original = sizes._may_write
    monkeypatch.setattr(sizes, "_may_write", lambda op: (scans.append(op), original(op))[1])
    doc = program_document(loaded)
    nodes = sum({id(g): len(g.nodes) for _, _, g in loaded.program.graphs()}.values())   # each distinct graph
    assert 0 < len(scans) <= nodes, (len(scans), nodes)   # before: 100 methods x 2 shadows x the graph's nodes
    assert doc["graphs"][":forward"]["nodes"][0]["type"] == "Float[s0, 4]"
    for x in (torch.randn(6, 4), torch.randn(1, 4)):
        torch.testing.assert_close(loaded(x), model(x))
