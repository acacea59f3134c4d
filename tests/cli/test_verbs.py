"""The CLI imports a verb's module only when a command line names that verb (cli/verbs.py: the one table the
command line imports modules by name from), so ``tracejit --help`` imports none and ``tracejit inspect`` not
the tracer, the ONNX exporter or migrate; the table's help lines are the verbs' own."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import tracejit
from tracejit import cli
from tracejit.cli import verbs

ROOT = Path(__file__).resolve().parents[2]


def _imported_verbs(monkeypatch, argv) -> list:
    """The verb modules ``tracejit ARGV`` asks the table for."""
    asked = []
    real = verbs.verb_module

    def spy(name):
        asked.append(name)
        return real(name)
    monkeypatch.setattr(verbs, "verb_module", spy)
    monkeypatch.setattr("tracejit.cli.app.verb_module", spy)
    try:
        cli.main(argv)
    except SystemExit:
        pass
    return asked


def test_help_imports_no_verb_and_a_command_only_its_own(monkeypatch, capsys, tmp_path):
    assert _imported_verbs(monkeypatch, ["--help"]) == []
    listing = capsys.readouterr().out
    assert all(f"{verb}  " in listing and help_line in listing for verb, (_, help_line) in verbs.VERBS.items())
    path = str(tmp_path / "f.tjit")
    tracejit.save(tracejit.trace(lambda x: x * 2, torch.randn(2)), path)
    assert _imported_verbs(monkeypatch, ["--debug", "inspect", path]) == ["inspect"]
    assert "tracejit function <lambda>" in capsys.readouterr().out
    assert _imported_verbs(monkeypatch, ["run", "--help"]) == ["run"]
    assert "--repeat" in capsys.readouterr().out


def test_the_tables_help_lines_are_the_verbs_own():
    parser = cli.build_parser()   # every verb's module imported and registered
    sub = next(a for a in parser._actions if a.dest == "command")
    registered = {action.dest: action.help for action in sub._choices_actions}
    assert registered == {verb: help_line for verb, (_, help_line) in verbs.VERBS.items()}


def _load_import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HEAVY = ("tracejit.api", "tracejit.trace.recorder", "tracejit.export.onnx_export", "tracejit.export.lowering",
         "tracejit.migrate", "tracejit.inference", "tracejit.hf")


def test_the_cli_and_inspect_import_neither_the_tracer_nor_the_onnx_exporter():
    """The module-level imports ``tracejit --help`` (cli/app.py) and ``tracejit inspect`` run, followed through
    the package (scripts/import_graph.py): no verb module but inspect's, no tracer, exporter or migrate."""
    graph = _load_import_graph()
    _, edges, *_ = graph.scan(ROOT / "tracejit")
    app = graph.imported_with(edges, "tracejit.cli.app")
    assert not app & {module for module, _ in verbs.VERBS.values()}
    inspect = graph.imported_with(edges, "tracejit.cli.inspect")
    assert "tracejit.serialize.loader" in inspect and "tracejit.cli.verbs" in inspect   # the measure follows
    assert not inspect & set(HEAVY), inspect & set(HEAVY)
    # the verbs that need them import them at module level (what the measure would miss if it stopped short)
    assert {"tracejit.api", "tracejit.trace.recorder", "tracejit.hf"} <= graph.imported_with(edges, "tracejit.cli.trace")
    assert "tracejit.export.lowering" in graph.imported_with(edges, "tracejit.cli.export")
    assert "tracejit.migrate" in graph.imported_with(edges, "tracejit.cli.migrate")


@pytest.mark.parametrize("verb", sorted(verbs.VERBS))
def test_each_verb_module_registers_its_verb(verb):
    import argparse
    sub = argparse.ArgumentParser().add_subparsers()
    verbs.verb_module(verb).register(sub)
    assert verb in sub.choices
