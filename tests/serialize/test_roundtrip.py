"""tracejit.save / tracejit.load round trips: a loaded program computes what the original does on
NEW inputs (other batch sizes), prints the same graph and code, has the same parameters and
state_dict (names and order), trains like the original, honours map_location and extra_files,
keeps its ledger, loads in a fresh interpreter where the module's class does not exist, and is
byte-reproducible and readable by the safetensors library.
"""
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import tracejit
from serialize_testlib import (Pair, assert_moves, assert_same, flat, load_bytes, parse, quiet_trace, split,
                               to_bytes)


# ---------------------------------------------------------------------------------------------
# models (each case: a traced object, the eager callable, and two NEW inputs of other batch sizes)
# ---------------------------------------------------------------------------------------------

class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


class KernelNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)

    def forward(self, x):
        return self.conv(x)

    def weighted_kernel_sum(self, weight):
        return weight * self.conv.weight


class Nested(nn.Module):
    """Nested tuple / dict / namedtuple inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, pair, d):
        s = self.lin(pair.a) + pair.b
        return {"sum": s, "parts": (d["x"] * s, Pair(d["ys"][0] - s, d["ys"][1].tanh()))}


class Shared(nn.Module):
    """One parameter registered under two names (two submodules, and twice on the root)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight
        self.w1 = nn.Parameter(torch.randn(4))
        self.register_parameter("w2", self.w1)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 4))

    def forward(self, x):
        return self.b(self.a(x)) * self.w1 + self.w2 * self.scale


def _conv_bn():
    m = ConvBN().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
        m.bn.weight.uniform_(0.5, 2)
    return m, tracejit.trace(m, torch.randn(2, 3, 6, 6)), [(torch.randn(3, 3, 7, 5),), (torch.randn(1, 3, 7, 5),)]


def _mlp():
    m = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 3))
    return m, tracejit.trace(m, torch.randn(4, 5)), [(torch.randn(7, 5),), (torch.randn(2, 5),)]


def _nested():
    m = Nested()

    def args(n):
        return (Pair(torch.randn(n, 3), torch.randn(n, 3)),
                {"x": torch.randn(n, 3), "ys": (torch.randn(n, 3), torch.randn(n, 3))})
    return m, tracejit.trace(m, args(2), strict=False), [args(5), args(1)]


def _shared():
    m = Shared()
    return m, tracejit.trace(m, torch.randn(2, 4)), [(torch.randn(6, 4),), (torch.randn(3, 4),)]


def _lstm():
    m = nn.LSTM(4, 6, num_layers=2, batch_first=True)
    return m, tracejit.trace(m, torch.randn(2, 5, 4)), [(torch.randn(3, 5, 4),), (torch.randn(1, 5, 4),)]


def _encoder():
    m = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    return m, tracejit.trace(m, torch.randn(2, 5, 8)), [(torch.randn(3, 5, 8),), (torch.randn(1, 5, 8),)]


def _kernel():
    m = KernelNet()
    traced = tracejit.trace_module(m, {"forward": torch.rand(1, 1, 5, 5), "weighted_kernel_sum": torch.rand(2, 1, 3, 3)})
    return m, traced, [(torch.rand(3, 1, 6, 7),), (torch.rand(2, 1, 4, 4),)]


_W = torch.linspace(-1.0, 2.0, 4)


def _function():
    fn = lambda x, y: torch.add(x, y, alpha=2) * _W  # noqa: E731  (_W is captured as a constant)
    traced = quiet_trace(fn, (torch.randn(2, 4), torch.randn(2, 4)))
    return fn, traced, [(torch.randn(5, 4), torch.randn(5, 4)), (torch.randn(1, 4), torch.randn(1, 4))]


MAKERS = {"function_with_constant": _function, "conv_bn_eval": _conv_bn, "mlp": _mlp, "trace_module": _kernel,
          "nested_io": _nested, "shared_param": _shared, "lstm": _lstm, "transformer_encoder_eval": _encoder}
_CACHE = {}


def case(name):
    """(eager, traced, loaded, new_inputs), built once per session."""
    if name not in _CACHE:
        torch.manual_seed(sum(map(ord, name)))
        eager, traced, inputs = MAKERS[name]()
        _CACHE[name] = (eager, traced, load_bytes(to_bytes(traced)), inputs)
    return _CACHE[name]


# ---------------------------------------------------------------------------------------------
# same outputs, graph, code, parameters
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MAKERS))
def test_loaded_matches_eager_on_new_inputs(name):
    eager, traced, loaded, (in1, in2) = case(name)
    assert type(loaded) is type(traced)
    with torch.no_grad():
        e1, e2 = eager(*in1), eager(*in2)
        assert_moves(e1, e2)                 # the inputs matter, so the comparison below means something
        assert_same(loaded(*in1), e1)
        assert_same(loaded(*in2), e2)
        assert_same(loaded(*in1), traced(*in1))


def test_nested_output_structure_survives():
    eager, traced, loaded, (in1, _) = case("nested_io")
    out, want = loaded(*in1), eager(*in1)
    assert isinstance(out, dict) and list(out) == ["sum", "parts"]
    assert isinstance(out["parts"], tuple) and len(out["parts"]) == 2
    inner = out["parts"][1]
    assert isinstance(inner, tuple) and type(inner)._fields == ("a", "b")   # a namedtuple look-alike
    assert_same(inner.a, want["parts"][1].a)
    assert_same(inner.b, want["parts"][1].b)
    # the namedtuple input is guarded as one argument: a wrong structure is refused
    with pytest.raises(TypeError):
        loaded((in1[0].a,), in1[1])


def test_trace_module_methods_survive():
    eager, traced, loaded, _ = case("trace_module")
    w1, w2 = torch.rand(1, 1, 3, 3), torch.rand(1, 1, 3, 3)
    assert_moves(eager.weighted_kernel_sum(w1), eager.weighted_kernel_sum(w2))
    with torch.no_grad():
        assert_same(loaded.weighted_kernel_sum(w1), eager.weighted_kernel_sum(w1))
        assert_same(loaded.weighted_kernel_sum(w2), eager.weighted_kernel_sum(w2))
    assert str(loaded.weighted_kernel_sum.graph).count("aten::mul") == 1
    assert "def weighted_kernel_sum" in loaded.weighted_kernel_sum.code


def _without_budget_checks(code: str) -> str:
    """A loaded program's code without the call-time budget checks loading adds (docs/SECURITY.md): the
    ``_tj_budget*`` lines (also those gated by ``if not 0 < x.numel() <= N:``, ``if x.numel() == 0:``,
    ``if a.shape != b.shape:`` or a norm's ``if x.shape[-1:] != (8,):``), and ``_tj_int.mul(a, b)`` read back as
    ``a * b`` (likewise pow, lshift)."""
    import re
    lines = [line for line in code.splitlines(keepends=True)
             if not re.match(r"\s*(if not 0 < \w+\.numel\(\) <= \d+: |if \w+\.numel\(\) == 0: |"
                             r"if \w+\.shape != \w+\.shape: |if \w+\.shape\[-\d+:\] != \([\d, ]*\)[^:]*: |"
                             r"if \w+\.dim\(\) < 2 or \w+\.shape\[1\] [^:]*: )?_tj_budget\w*\(", line)]
    ops = {"mul": "*", "pow": "**", "lshift": "<<"}
    return re.sub(r"_tj_int\.(mul|pow|lshift)\(([^,()]+), ([^,()]+)\)", lambda m: f"{m[2]} {ops[m[1]]} {m[3]}",
                  "".join(lines))


@pytest.mark.parametrize("name", list(MAKERS))
def test_graph_text_and_code_survive(name):
    _, traced, loaded, _ = case(name)
    assert str(loaded.graph) == str(traced.graph)
    assert _without_budget_checks(loaded.code) == traced.code
    assert str(loaded.inlined_graph) == str(traced.inlined_graph)
    if isinstance(traced, tracejit.TracedModule):
        for path, sub in traced.named_modules():
            lsub = loaded.get_submodule(path) if path else loaded
            assert lsub.original_name == sub.original_name
            for method, fn in sub._traced_methods.items():
                assert str(lsub._traced_methods[method].graph) == str(fn.graph), (path, method)
                assert _without_budget_checks(lsub._traced_methods[method].code) == fn.code, (path, method)


def test_graph_survives_minimal_kwarg_order():
    """One op with keyword arguments not in alphabetical order: the order survives (the JSON is
    written with sorted keys, so keyword arguments must be stored as ordered pairs)."""
    traced = tracejit.trace(lambda x: x + torch.ones(3, dtype=torch.float32, device="cpu"), torch.randn(3))
    assert "dtype=torch.float32, device=" in traced.code      # the order the call was written in
    loaded = load_bytes(to_bytes(traced))
    assert loaded(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    assert str(loaded.graph) == str(traced.graph)
    assert _without_budget_checks(loaded.code) == traced.code   # an add of two tensors: its broadcast is checked


@pytest.mark.parametrize("name", [n for n in MAKERS if n != "function_with_constant"])
def test_parameters_buffers_and_state_dict_survive(name):
    eager, traced, loaded, _ = case(name)
    assert [n for n, _ in loaded.named_parameters()] == [n for n, _ in traced.named_parameters()]
    assert [n for n, _ in loaded.named_buffers()] == [n for n, _ in traced.named_buffers()]
    assert [n for n, _ in loaded.named_modules()] == [n for n, _ in traced.named_modules()]
    want, got = traced.state_dict(), loaded.state_dict()
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    for (n, p), (_, q) in zip(loaded.named_parameters(), traced.named_parameters()):
        assert isinstance(p, nn.Parameter) and p.requires_grad == q.requires_grad, n
    assert loaded.training == traced.training
    # the loaded module owns its tensors: they are not the original's
    for (_, p), (_, q) in zip(loaded.named_parameters(), traced.named_parameters()):
        assert p is not q


def test_shared_parameter_stays_shared():
    _, traced, _, _ = case("shared_param")
    loaded = load_bytes(to_bytes(traced))    # a copy of its own: this test writes to it
    assert loaded.a.weight is loaded.b.weight
    assert loaded.w1 is loaded.w2
    assert "b.weight" in loaded.state_dict() and "w2" in loaded.state_dict()
    with torch.no_grad():
        loaded.a.weight.add_(1.0)
    assert torch.equal(loaded.a.weight, loaded.b.weight)


def test_function_constant_and_name_survive():
    fn, traced, loaded, (in1, _) = case("function_with_constant")
    assert loaded.__name__ == traced.__name__
    assert len(loaded.graph.constants) == len(traced.graph.constants) == 1
    assert torch.equal(loaded.graph.constants[0], _W)
    assert "tracejit::constant" in str(loaded.graph)
    assert_same(loaded(*in1), fn(*in1))
    # nothing reads the rank: another rank runs as in eager; a missing argument is a TypeError
    a, b = torch.randn(2, 2, 4), torch.randn(2, 4)
    assert_same(loaded(a, b), fn(a, b))
    with pytest.raises(TypeError):
        loaded(torch.randn(2, 4))


@pytest.mark.parametrize("name", ["function_with_constant", "conv_bn_eval"])
def test_ledger_survives(name):
    _, traced, loaded, _ = case(name)
    assert traced.ledger, "the trace should have a ledger to compare"
    assert [(e.kind, e.message, e.filename, e.lineno) for e in loaded.ledger] == \
           [(e.kind, e.message, e.filename, e.lineno) for e in traced.ledger]
    assert all(isinstance(e, tracejit.LedgerEntry) for e in loaded.ledger)


def test_function_ledger_has_constant_at_user_line():
    _, traced, loaded, _ = case("function_with_constant")
    consts = [e for e in loaded.ledger if e.kind == "constant"]
    assert consts and consts[0].filename == __file__
    assert consts[0].lineno == [e for e in traced.ledger if e.kind == "constant"][0].lineno


# ---------------------------------------------------------------------------------------------
# training after load
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "lstm", "shared_param"])
def test_backward_after_load_matches_eager(name):
    eager, traced, loaded, (in1, _) = case(name)
    x = in1[0]
    for m in (eager, loaded):
        m.zero_grad(set_to_none=True)
        out = m(x)
        loss = sum((o.float() ** 2).mean() for o in flat(out))
        loss.backward()
    want = dict(eager.named_parameters())
    got = dict(loaded.named_parameters())
    assert list(got) == list(want)
    for k in want:
        assert want[k].grad is not None and want[k].grad.abs().sum() > 0, k
        torch.testing.assert_close(got[k].grad, want[k].grad, rtol=1e-5, atol=1e-6, msg=k)
    eager.zero_grad(set_to_none=True)
    loaded.zero_grad(set_to_none=True)


def _sgd_step(params, lr):
    """What torch.optim.SGD.step does (torch.optim itself costs seconds to import): the parameters
    must be leaves with gradients, updated in place."""
    with torch.no_grad():
        for p in params:
            assert p.is_leaf and p.grad is not None
            p.add_(p.grad, alpha=-lr)


def test_optimizer_step_changes_loaded_params_only():
    torch.manual_seed(3)
    eager = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    traced = tracejit.trace(eager, torch.randn(4, 5))
    loaded = load_bytes(to_bytes(traced))
    before_loaded = {k: v.detach().clone() for k, v in loaded.state_dict().items()}
    before_eager = {k: v.detach().clone() for k, v in eager.state_dict().items()}
    x, y = torch.randn(9, 5), torch.randn(9, 1)
    loss0 = nn.functional.mse_loss(loaded(x), y)
    for _ in range(3):
        loaded.zero_grad()
        nn.functional.mse_loss(loaded(x), y).backward()
        _sgd_step(loaded.parameters(), lr=0.1)
    after = loaded.state_dict()
    assert all(not torch.equal(after[k], before_loaded[k]) for k in after)
    assert nn.functional.mse_loss(loaded(x), y) < loss0
    # the original module is untouched, and the loaded module computes with its new weights
    assert all(torch.equal(eager.state_dict()[k], before_eager[k]) for k in before_eager)
    eager.load_state_dict(after)
    with torch.no_grad():
        assert_same(loaded(x), eager(x))


def test_optimizer_step_on_module_loaded_from_path(tmp_path):
    """A file-backed load (memory map) gives writable parameters, and the file stays as saved."""
    torch.manual_seed(4)
    m = nn.Linear(3, 2)
    path = tmp_path / "lin.tj"
    tracejit.save(tracejit.trace(m, torch.randn(2, 3)), path)
    saved = path.read_bytes()
    loaded = tracejit.load(path)
    loaded(torch.randn(4, 3)).sum().backward()
    _sgd_step(loaded.parameters(), lr=0.5)
    assert not torch.equal(loaded.weight, m.weight)
    assert path.read_bytes() == saved
    assert torch.equal(tracejit.load(path).weight, m.weight)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
def test_a_forked_worker_writing_a_loaded_weight_leaves_the_parent_s_alone(tmp_path):
    """A pre-fork server loads once, then forks workers: a worker's in-place write to a loaded parameter stays
    its own (the loader's memory is private, copy-on-write after fork; shared anonymous memory would hand the
    write to the parent and every sibling)."""
    torch.manual_seed(5)
    m = nn.Linear(64, 64)
    path = tmp_path / "lin.tj"
    tracejit.save(tracejit.trace(m, torch.randn(2, 64)), path)
    loaded = tracejit.load(path)
    before = loaded.weight.detach().clone()
    pid = os.fork()
    if pid == 0:   # the worker: write, then leave without running the parent's cleanup
        with torch.no_grad():
            loaded.weight.add_(1.0)
        os._exit(0 if torch.equal(loaded.weight, before + 1.0) else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert torch.equal(loaded.weight, before)
    x = torch.randn(3, 64)
    assert torch.equal(loaded(x), m(x))


# ---------------------------------------------------------------------------------------------
# map_location, paths, extra_files
# ---------------------------------------------------------------------------------------------

def test_map_location_meta():
    eager, traced, _, (in1, _) = case("mlp")
    loaded = load_bytes(to_bytes(traced), map_location="meta")
    assert {p.device.type for p in loaded.parameters()} == {"meta"}
    assert [n for n, _ in loaded.named_parameters()] == [n for n, _ in traced.named_parameters()]
    assert all(p.shape == q.shape for p, q in zip(loaded.parameters(), traced.parameters()))
    out = loaded(torch.empty(7, 5, device="meta"))
    assert out.device.type == "meta" and out.shape == (7, 3)


def test_map_location_meta_function_constant():
    _, traced, _, _ = case("function_with_constant")
    loaded = load_bytes(to_bytes(traced), map_location="meta")
    assert loaded.graph.constants[0].device.type == "meta"


@pytest.mark.parametrize("where", [torch.device("cpu"), "cpu"])
def test_map_location_cpu(where):
    eager, traced, _, (in1, in2) = case("conv_bn_eval")
    loaded = load_bytes(to_bytes(traced), map_location=where)
    assert {p.device for p in loaded.parameters()} == {torch.device("cpu")}
    with torch.no_grad():
        assert_same(loaded(*in2), eager(*in2))


def test_map_location_to_the_device_and_back(device):
    eager, traced, _, (in1, in2) = case("conv_bn_eval")
    there = load_bytes(to_bytes(traced), map_location=device)
    assert {p.device.type for p in there.parameters()} == {device.type}   # ('cuda' loads onto cuda:0)
    with torch.no_grad():
        out = there(*(t.to(device) for t in in2))
        assert out.device.type == device.type
        assert_same(out.cpu(), eager(*in2))
        back = load_bytes(to_bytes(there), map_location="cpu")   # saved from ``device``, loaded on the cpu
        assert_same(back(*in1), eager(*in1))


def test_save_and_load_with_paths(tmp_path):
    eager, traced, _, (in1, _) = case("conv_bn_eval")
    tracejit.save(traced, str(tmp_path / "a.tj"))
    tracejit.save(traced, tmp_path / "b.tj")
    with open(tmp_path / "c.tj", "wb") as f:
        tracejit.save(traced, f)
    for name in ("a.tj", "b.tj", "c.tj"):
        for how in (str(tmp_path / name), tmp_path / name):
            loaded = tracejit.load(how)
            with torch.no_grad():
                assert_same(loaded(*in1), eager(*in1))
        with open(tmp_path / name, "rb") as f:
            assert isinstance(tracejit.load(f), tracejit.TracedModule)
    assert sorted(os.listdir(tmp_path)) == ["a.tj", "b.tj", "c.tj"]


def test_extra_files_round_trip():
    _, traced, _, _ = case("mlp")
    raw = to_bytes(traced, extra_files={"a.txt": "hello", "notes/b.json": '{"k": 1}'})
    got = {"a.txt": "", "notes/b.json": ""}
    tracejit.load(io.BytesIO(raw), extra_files=got)
    assert got == {"a.txt": b"hello", "notes/b.json": b'{"k": 1}'}     # bytes, as torch.jit.load
    # only the names asked for are filled in; a name the file does not hold is left as it was
    only = {"a.txt": "", "missing.txt": "default"}
    load_bytes(raw, extra_files=only)
    assert only == {"a.txt": b"hello", "missing.txt": "default"}
    assert isinstance(load_bytes(raw), tracejit.TracedModule)


def test_extra_files_on_function_and_unicode():
    _, traced, _, _ = case("function_with_constant")
    raw = to_bytes(traced, extra_files={"u.txt": "héllo ✓"})
    got = {"u.txt": ""}
    load_bytes(raw, extra_files=got)
    assert got["u.txt"].decode("utf-8") == "héllo ✓"


def test_extra_files_binary_content_survives():
    _, traced, _, _ = case("mlp")
    blob = bytes(range(256)) * 3
    got = {"w.bin": ""}
    load_bytes(to_bytes(traced, extra_files={"w.bin": blob, "v.bin": bytearray(b"\x00\xff")}), extra_files=got)
    assert got == {"w.bin": blob}


# ---------------------------------------------------------------------------------------------
# the file: reproducible bytes, a valid safetensors file
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["conv_bn_eval", "shared_param", "function_with_constant", "nested_io"])
def test_saving_twice_gives_identical_bytes(name, tmp_path):
    _, traced, _, _ = case(name)
    a, b = to_bytes(traced), to_bytes(traced)
    assert a == b
    tracejit.save(traced, tmp_path / "one.tj")
    tracejit.save(traced, tmp_path / "two.tj")
    assert (tmp_path / "one.tj").read_bytes() == (tmp_path / "two.tj").read_bytes() == a


@pytest.mark.parametrize("name", ["conv_bn_eval", "function_with_constant", "trace_module"])
def test_resaving_a_loaded_program_gives_identical_bytes(name):
    _, traced, loaded, _ = case(name)
    assert to_bytes(loaded) == to_bytes(traced)


def test_safetensors_library_reads_the_file(tmp_path):
    from safetensors import safe_open
    eager, traced, _, _ = case("conv_bn_eval")
    path = tmp_path / "m.tj"
    tracejit.save(traced, path)
    with safe_open(str(path), "pt") as f:
        keys = set(f.keys())
        assert set(eager.state_dict()) <= keys
        for k, v in eager.state_dict().items():
            assert torch.equal(f.get_tensor(k), v), k
        meta = f.metadata()
    assert list(meta) == ["tracejit"]
    doc = json.loads(meta["tracejit"])
    assert doc["format"] == "tracejit"
    assert doc["schema_version"] == tracejit.serialize.SCHEMA_VERSION == 3
    assert doc["tracejit_version"] == tracejit.__version__
    assert len(doc["crc32"]) == 8 and int(doc["crc32"], 16) >= 0 and doc["crc32"] != "00000000"
    assert doc["program"]["kind"] == "module"


def test_function_file_holds_constant_tensor():
    _, traced, _, _ = case("function_with_constant")
    raw = to_bytes(traced)
    doc, tensors = parse(raw)
    assert doc["program"]["kind"] == "function"
    assert any(torch.equal(t, _W) for t in tensors.values())
    header, _ = split(raw)
    assert set(header) - {"__metadata__"} == set(tensors)


def test_shared_parameter_is_stored_once():
    _, traced, _, _ = case("shared_param")
    _, tensors = parse(to_bytes(traced))
    # a.weight/b.weight and w1/w2 are one tensor each
    assert len(tensors) == len(list(traced.parameters())) + len(list(traced.buffers()))


def test_nothing_is_pickled():
    _, traced, _, _ = case("conv_bn_eval")
    raw = to_bytes(traced)
    assert b"\x80\x04\x95" not in raw and b"\x80\x02" not in raw and not raw.startswith(b"PK")


# ---------------------------------------------------------------------------------------------
# a fresh interpreter where the module's class does not exist
# ---------------------------------------------------------------------------------------------

class OnlyHere(nn.Module):
    """Defined in this test file only: a fresh interpreter cannot import it."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 5)
        self.norm = nn.LayerNorm(5)
        self.register_buffer("offset", torch.linspace(-1, 1, 5))

    def forward(self, x, extra):
        h = self.norm(self.proj(x)) + self.offset
        return h * extra["gain"], (h.sum(-1),)


def test_load_in_fresh_interpreter(tmp_path):
    from safetensors.torch import load_file, save_file
    torch.manual_seed(11)
    m = OnlyHere().eval()
    traced = tracejit.trace(m, (torch.randn(2, 6), {"gain": torch.randn(2, 5)}))
    fn_traced = quiet_trace(lambda x: (x * _W).cumsum(-1), torch.randn(3, 4))
    tracejit.save(traced, tmp_path / "m.tj", extra_files={"readme": "made in a test"})
    tracejit.save(fn_traced, tmp_path / "f.tj")
    x, gain, fx = torch.randn(5, 6), torch.randn(5, 5), torch.randn(6, 4)
    x2 = torch.randn(5, 6)
    assert_moves(m(x, {"gain": gain}), m(x2, {"gain": gain}))
    save_file({"x": x, "gain": gain, "fx": fx}, str(tmp_path / "in.safetensors"))
    script = textwrap.dedent(f"""
        import sys, tracejit, torch
        from safetensors.torch import load_file, save_file
        d = {str(tmp_path)!r}
        assert "test_roundtrip" not in sys.modules and not hasattr(sys.modules["__main__"], "OnlyHere")
        inp = load_file(d + "/in.safetensors")
        extra = {{"readme": ""}}
        m = tracejit.load(d + "/m.tj", extra_files=extra)
        f = tracejit.load(d + "/f.tj")
        assert extra == {{"readme": b"made in a test"}}, extra
        assert m.original_name == "OnlyHere" and type(m).__name__ == "TracedModule", m
        out, (s,) = m(inp["x"], {{"gain": inp["gain"]}})
        save_file({{"out": out.contiguous(), "s": s.contiguous(), "f": f(inp["fx"]).contiguous()}}, d + "/out.safetensors")
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got = load_file(str(tmp_path / "out.safetensors"))
    with torch.no_grad():
        out, (s,) = m(x, {"gain": gain})
    assert_same(got["out"], out)
    assert_same(got["s"], s)
    assert_same(got["f"], (fx * _W).cumsum(-1))
