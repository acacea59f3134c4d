"""Files written by older tracejit versions (tests/serialize/old_files/: made by the writers of past commits,
see make_old_files.py) decode into a current Program: the decoder upgrades them (a schema-1 root method gets
the training guard node a trace makes today; codegen adds none), nothing runtime is built while decoding,
and the decoded Program matches one traced today from the same model; loaded, they run on new inputs as
eager and torch.jit.trace do."""
from __future__ import annotations

import importlib.util
import pathlib
import re
import warnings

import pytest
import torch

import tracejit
from tracejit.runtime import assemble, traced as traced_module
from tracejit.serialize import read_program

OLD = pathlib.Path(__file__).parent / "old_files"
_spec = importlib.util.spec_from_file_location("make_old_files", OLD / "make_old_files.py")
maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(maker)
FILES = [(v, kind) for v in (1, 2) for kind in ("module", "function")]


def _text(graph) -> str:
    """A graph's text without source-line comments (the files were traced from another path), and without
    the guards on a submodule's training flag (trace/module_flags.py) that traces record since."""
    kept = [n for n in graph.nodes if not (n.op == "tracejit::guard" and n.attrs.get("path"))]
    shown = graph.nodes
    try:
        graph.nodes = kept
        return re.sub(r"  # .*", "", str(graph))
    finally:
        graph.nodes = shown


def _today(kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "module":
            model = maker.model()
            return model, tracejit.trace(model, torch.randn(2, 3))
        return maker.fn, tracejit.trace(maker.fn, (torch.randn(2, 3), torch.randn(2, 3)))


@pytest.mark.parametrize("version, kind", FILES)
def test_an_old_file_decodes_into_the_program_traced_today(version, kind, monkeypatch):
    def no_runtime(*a, **k):
        raise AssertionError("the decoder built a runtime object")
    for name in ("compile_loaded", "module_tree", "install"):
        monkeypatch.setattr(assemble, name, no_runtime)
    monkeypatch.setattr(traced_module, "compile_method", no_runtime)
    monkeypatch.setattr(traced_module._TracedProgram, "__init__", no_runtime)
    program = read_program(OLD / f"schema{version}_{kind}.tj")
    monkeypatch.undo()

    eager, traced = _today(kind)
    today = traced.program
    assert (program.kind, program.name, program.entry_points, program.training) == \
        (today.kind, today.name, today.entry_points, today.training)
    assert [(m.path, m.type_name, m.training, m.children, m.method_names) for m in program.modules] == \
        [(m.path, m.type_name, m.training, m.children, m.method_names) for m in today.modules]
    for mine, theirs in zip(program.modules, today.modules):
        assert [n for n, _ in mine.parameters] == [n for n, _ in theirs.parameters]
        for (_, a), (_, b) in zip(mine.parameters, theirs.parameters):
            assert torch.equal(a, b)                     # the same seeded weights
    assert [(p, m) for p, m, _ in program.graphs()] == [(p, m) for p, m, _ in today.graphs()]
    for (_, _, mine), (_, _, theirs) in zip(program.graphs(), today.graphs()):
        assert _text(mine) == _text(theirs)
    guards = [n.attrs["test"] for n in program.graph().nodes if n.op == "tracejit::guard"]
    assert guards == (["training"] if kind == "module" else [])   # schema 1: added by the decoder


@pytest.mark.parametrize("version, kind", FILES)
def test_an_old_file_loads_and_runs_on_new_inputs(version, kind):
    loaded = tracejit.load(OLD / f"schema{version}_{kind}.tj")
    eager = maker.model() if kind == "module" else maker.fn
    args = (torch.randn(5, 3),) if kind == "module" else (torch.randn(5, 3), torch.randn(5, 3))   # batch 5, not 2
    other = (torch.randn(5, 3),) if kind == "module" else (torch.randn(5, 3), torch.randn(5, 3))
    assert not torch.equal(eager(*args), eager(*other))
    torch.testing.assert_close(loaded(*args), eager(*args))
    reference = torch.jit.trace(eager, tuple(torch.randn(2, 3) for _ in args))
    torch.testing.assert_close(loaded(*args), reference(*args))
    if kind == "module":
        assert loaded.code.count("if self.training: _tj_guard(") == 1   # one guard: the decoder's node
        with pytest.raises(tracejit.GuardError, match="traced in eval mode"):
            loaded.train()(*args)
