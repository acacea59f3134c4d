"""``tracejit inspect`` reads the file's Program (issue #24, item 1): its lines, tensor rows, specializations
and ``--code`` come from ``serialize.read_program`` and codegen run on the Program's graphs, never from the
objects ``tracejit.load`` compiles. The runtime's builders are patched to fail here, and what inspect prints
is compared with what the runtime's loaded objects say (their ``.code``, tensors and specializations)."""
from __future__ import annotations

import ast
import io
import os
import re
import warnings

import pytest
import torch
from torch import nn

import tracejit
from filesurgery import parse, rewrite
from tracejit import cli
from tracejit.cli.common import tensor_rows
from tracejit.codegen.program_code import method_sources
from tracejit.runtime import assemble, method_compiler, specialize
from tracejit.runtime.traced import TracedFunction, TracedModule, program_of
from tracejit.serialize import loader, read_program

CLI_DIR = os.path.join(os.path.dirname(tracejit.__file__), "cli")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


class Net(nn.Module):
    """Shared and repeated submodules, a buffer, a size branch (a guard and, once called with a small batch,
    a second specialization) and a size-driven repeat (a call budget check in the loaded code)."""

    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = self.a          # one module at two paths: its tensors listed once, with their aliases
        self.c = Block()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        y = self.c(self.b(self.a(x))) * self.scale
        if x.shape[0] > 2:
            y = y + 1
        return y.repeat(x.shape[0], 1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("inspect_program")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = tracejit.trace(Net().eval(), torch.randn(3, 4))
        assert not torch.equal(net(torch.randn(1, 4)), net(torch.randn(1, 4)))   # a second specialization
        fn = tracejit.trace(lambda x, n: (x * 2).expand(n, -1, -1), (torch.randn(2, 3), 4))
    paths = {"net": str(d / "net.tjit"), "fn": str(d / "fn.tjit"), "renamed": str(d / "renamed.tjit")}
    tracejit.save(net, paths["net"])
    tracejit.save(fn, paths["fn"])
    # two more root methods naming forward's stored graph: the loader compiles it once and renames it
    raw = open(paths["net"], "rb").read()

    def add_methods(doc):
        root = next(m for m in doc["program"]["modules"] if m["path"] == "")
        root["methods"] += [["encode", root["methods"][0][1]], ["decode", root["methods"][0][1]]]
    open(paths["renamed"], "wb").write(rewrite(raw, edit_doc=add_methods))
    assert "encode" in [n for n, _ in parse(open(paths["renamed"], "rb").read())[0]["program"]["modules"][0]["methods"]]
    return paths


def _runtime_code(loaded) -> dict:
    """``{(path, method): code}`` as the runtime's loaded objects hold it (the reference)."""
    if isinstance(loaded, TracedFunction):
        return {("", "forward"): loaded.code}
    program = program_of(loaded)
    return {(path, name): getattr(m, name).code for path, m in loaded.named_modules()
            for name in program.module(path).method_names}


@pytest.mark.parametrize("name", ["net", "fn", "renamed"])
def test_code_from_the_program_is_what_load_compiles(files, name):
    sources = method_sources(read_program(files[name], map_location="meta"))
    expected = _runtime_code(tracejit.load(files[name]))
    assert sources == expected
    if name == "renamed":   # the renamed def lines, and the loaded code's budget checks, are in the comparison
        assert sources[("", "encode")].startswith("def encode(self, x)")
        assert "_tj_budget" in sources[("", "forward")]


def _patch_runtime_to_fail(monkeypatch):
    """Every way the runtime builds a callable object fails: inspect must not need one."""
    def boom(*args, **kwargs):
        raise AssertionError("tracejit inspect built a runtime object")
    for owner, attr in [(assemble, "compile_loaded"), (assemble, "compile_program"), (assemble, "module_tree"),
                        (loader, "compile_loaded"), (method_compiler, "compile_method"),
                        (TracedModule, "__init__"), (TracedFunction, "__init__"),
                        (specialize, "enable_for_module"), (specialize, "enable_for_function")]:
        monkeypatch.setattr(owner, attr, boom)


def _inspect(capsys, path) -> str:
    assert cli.main(["inspect", path, "--graph", "--code"]) == 0
    return capsys.readouterr().out


def test_inspect_builds_no_runtime_object_and_prints_the_loaded_programs_code(files, capsys, monkeypatch):
    expected = _runtime_code(tracejit.load(files["net"]))
    _patch_runtime_to_fail(monkeypatch)
    with pytest.raises(AssertionError, match="built a runtime object"):
        tracejit.load(files["net"])   # the patch holds
    out = _inspect(capsys, files["net"])
    for code in expected.values():
        assert code.rstrip("\n") in out


def test_tensor_rows_and_specializations_match_the_loaded_objects(files, capsys):
    loaded = tracejit.load(files["net"])
    rows, by_id = [], {}   # the runtime side: the loaded modules walked as nn.Module does
    for path, m in loaded.named_modules(remove_duplicate=False):
        prefix = f"{path}." if path else ""
        for n, t in [*m._parameters.items(), *m._buffers.items()]:
            if id(t) in by_id:
                by_id[id(t)].append(prefix + n)
            else:
                by_id[id(t)] = []
                rows.append((prefix + n, list(t.shape), by_id[id(t)]))
    program_rows = tensor_rows(read_program(files["net"], map_location="meta"))
    assert [(r[0], [int(s) for s in r[2].strip("[]").split(", ")], r[5]) for r in program_rows] == rows
    assert [r[0] for r in program_rows[:3]] == ["scale", "a.lin.weight", "a.lin.bias"]
    assert program_rows[1][5] == ["b.lin.weight"]   # the module shared at a and b: its tensors once

    spec_set = specialize.sets_of(loaded)["forward"]
    reasons = [s.reason for s in spec_set.extra()]
    assert len(reasons) == 1 and "'gt'" in reasons[0]
    out = _inspect(capsys, files["net"])
    block = out.split("specializations (")[1].split("\n\n")[0].splitlines()[1:]
    assert [line.strip() for line in block[1::2]] == ["traced from the example inputs"] + \
        [f"made because {r}" for r in reasons]
    assert len(block) == 2 * len(spec_set.entries)


def test_the_command_line_modules_that_describe_files_import_no_runtime():
    """inspect (and the helpers it shares) read Programs: no import of tracejit.runtime. The commands that
    trace (trace.py) or run (run.py) a program hold its runtime object and ask it for its Program."""
    holders = {"trace.py", "run.py"}
    for name in sorted(os.listdir(CLI_DIR)):
        if not name.endswith(".py") or name in holders:
            continue
        tree = ast.parse(open(os.path.join(CLI_DIR, name)).read())
        for node in ast.walk(tree):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            found = [x for x in [module or "", *names] if re.search(r"(^|\.)runtime(\.|$)", x)]
            assert not found, f"cli/{name}:{node.lineno} imports the runtime ({found})"
            if isinstance(node, ast.Attribute):
                assert not node.attr.startswith("_traced"), f"cli/{name}:{node.lineno} reads {node.attr}"
