"""The package's import graph stays acyclic (issue #24 items 1 and 5), measured by scripts/import_graph.py:
no cycle and no upward edge, even counting function-level imports and declared lazy imports (``LazyModule`` and the
tables of modules imported by name); function-level imports are of optional dependencies only, each with a comment;
every ``LazyModule`` is on the reviewed LAZY_MODULES list.

The allow-lists hold the cycles and long files not broken yet, each with its issue; they may only shrink: a
listed cycle that is gone (or changed) fails too, so the list is edited in the commit that breaks it."""
import importlib.util
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Module-level import cycles not broken yet (each with its issue).  Sorted members of each component.
ALLOWED_CYCLES: list = []
# Files over 400 lines not split yet (each with its issue).
ALLOWED_LONG_FILES: set = set()
# Module-level imports of a higher layer (docs/DESIGN.md "Layers") not removed yet, each with its reason.
ALLOWED_UPWARD_EDGES: dict = {}
# Function-level imports of a higher layer (an upward edge the import graph does not show), reviewed: none left.
ALLOWED_HIDDEN_UPWARD_EDGES: dict = {}
# Cycles that only function-level imports close (the import graph does not show them), reviewed: none left.
ALLOWED_HIDDEN_CYCLES: list = []
# Function-level imports of tracejit's own modules: none (issue #24 item 5). A module imported on first use is a
# declared ``LazyModule`` (tracejit/lazy_module.py), reviewed here with its reason; the import graph counts it.
DEFERRED_IMPORTS: dict = {}
LAZY_MODULES: dict = {
    ("tracejit.export", "tracejit.export.onnx_export"): "onnx_export imports onnxscript (the onnx extra): "
                                                        "tracejit.export / ExportError stay importable without it",
    ("tracejit.serialize", "tracejit.serialize.archive"): "the writer: a server that only loads never imports it "
                                                          "(issue #22 item 4, tests/serve)",
    ("tracejit.user_methods", "tracejit.viewer"): ".to_html: a server that loads and calls programs never imports "
                                                  "the viewer (issue #22 item 4)",
    ("tracejit.cli.view", "tracejit.cli.netron"): "view --netron runs the ONNX exporter (the onnx extra); the HTML "
                                                  "view works without it",
    ("tracejit.runtime.traced", "tracejit.passes.inline"): "only .inlined_graph flattens: a server's load and call "
                                                           "never import passes/ (issue #22 item 4, tests/serve)",
    ("tracejit.runtime.undo", "tracejit.passes.written"): "its alias facts, only for a root method that writes in "
                                                          "place before a guard (rare)",
    ("tracejit.runtime.specialize", "tracejit.passes.inline"): "a retrace of a live object compiles its trace "
                                                               "inlined; a loaded program never retraces (#22)",
    ("tracejit.runtime.specialize", "tracejit.runtime.private_rng"): "the retrace's private random state: a "
                                                                     "loaded program never retraces (#22)",
    ("tracejit.runtime.specialize", "tracejit.runtime.state"): "the module state a retrace puts back: a loaded "
                                                               "program never retraces (#22)",
    ("tracejit.runtime.traced", "tracejit.runtime.constants"): ".to() / .cuda() of a traced module: not a "
                                                               "server's load and call (#22)",
    ("tracejit.runtime.traced", "tracejit.runtime.program_of"): ".program (save, migrate, the viewer): not a "
                                                                "server's load and call (#22)",
    ("tracejit.codegen.capture_emit", "tracejit.support.no_backward"): "only a custom autograd Function's node "
                                                                       "calls it: most loads have none (#22)",
    # a load that hits the code cache (serialize/code_cache.py) neither checks nor generates code (#22 item 4)
    ("tracejit.ops", "tracejit.ops.aten"): "ATen facts: the tracer, the passes and the validator ask them; a load "
                                           "from the code cache does not",
    ("tracejit.ops", "tracejit.ops.overrides"): "the reviewed facts and vocabularies: likewise",
    ("tracejit.ops", "tracejit.ops.purity"): "DCE / CSE facts: the passes only",
    ("tracejit.runtime.method_compiler", "tracejit.codegen.python"): "the code generator: a load from the code "
                                                                     "cache makes its functions without it",
    ("tracejit.serialize.budget_plan", "tracejit.serialize.op_allowlist"): "consulted while code is generated",
    ("tracejit.serialize.budget_plan", "tracejit.serialize.op_checks"): "likewise",
    ("tracejit.serialize.budget_plan", "tracejit.serialize.schema_check"): "likewise",
    ("tracejit.serialize.budget_plan", "tracejit.serialize.size_rules"): "likewise",
    ("tracejit.serialize.budget_plan", "tracejit.serialize.guards"): "likewise (which call guards broadcast their "
                                                                  "operands: round 25)",
    ("tracejit.serialize.budget_plan", "tracejit.ops.aten"): "likewise (op schemas, to bind a node's arguments)",
    ("tracejit.serialize.cached_methods", "tracejit.serialize.size_rules"): "only a program with call-time size "
                                                                            "checks needs the rules",
    ("tracejit.serialize.encode", "tracejit.trace.ops"): "what saving checks: a server that only loads never "
                                                         "imports it",
    ("tracejit.serialize.encode", "tracejit.serialize.schema_check"): "likewise",
    ("tracejit.serialize.encode", "tracejit.serialize.uninitialized"): "likewise",
    ("tracejit.serialize.encode", "tracejit.serialize.guards"): "likewise (a guard's attributes as data)",
    ("tracejit.serialize.program_decoder", "tracejit.serialize.validate"): "the per-op checks: a load from the "
                                                                           "code cache skips them",
}


def _load_script():
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


import_graph = _load_script()


@pytest.fixture(scope="module")
def report():
    return import_graph.report(ROOT / "tracejit")


def test_no_import_cycle_outside_the_allow_list(report):
    new = [c for c in report["cycles"] if c not in ALLOWED_CYCLES]
    assert not new, f"new module-level import cycles (break them; a function-level import is no fix): {new}"


def test_allow_list_only_shrinks(report):
    stale = [c for c in ALLOWED_CYCLES if c not in report["cycles"]]
    assert not stale, f"these allowed cycles are gone or changed: remove them from ALLOWED_CYCLES: {stale}"


def test_no_new_file_over_the_line_budget(report):
    long_files = {path for path, _ in report["long_files"]}
    too_long = long_files - ALLOWED_LONG_FILES
    assert not too_long, f"files over {import_graph.MAX_LINES} lines: {too_long}"
    assert not ALLOWED_LONG_FILES - long_files, "a listed long file is short now: remove it from ALLOWED_LONG_FILES"


def test_no_upward_edge_outside_the_allow_list(report):
    new = [e for e in report["upward_edges"] if e not in ALLOWED_UPWARD_EDGES]
    assert not new, f"imports of a higher layer (docs/DESIGN.md, Layers): move the code down or invert the call: {new}"
    stale = [e for e in ALLOWED_UPWARD_EDGES if e not in report["upward_edges"]]
    assert not stale, f"these allowed upward edges are gone: remove them from ALLOWED_UPWARD_EDGES: {stale}"


def test_no_hidden_upward_edge_outside_the_reviewed_list(report):
    found = [tuple(e) for e in report["hidden_upward_edges"]]
    new = [e for e in found if e not in ALLOWED_HIDDEN_UPWARD_EDGES]
    assert not new, f"function-level imports of a higher layer (a hidden upward edge): {new}"
    stale = [e for e in ALLOWED_HIDDEN_UPWARD_EDGES if e not in found]
    assert not stale, f"these reviewed hidden upward edges are gone: remove them: {stale}"


def test_no_hidden_cycle_outside_the_reviewed_list(report):
    found = report["cycles_with_function_imports"]
    new = [c for c in found if c not in ALLOWED_HIDDEN_CYCLES]
    assert not new, f"cycles closed by function-level imports (break them: move the shared piece down): {new}"
    stale = [c for c in ALLOWED_HIDDEN_CYCLES if c not in found]
    assert not stale, f"these reviewed hidden cycles are gone: remove them: {stale}"


def _sites(report) -> list:
    """(module, target) of every function-level import."""
    return [(site.split(":")[0], site.split(" -> ")[1]) for site in report["function_import_sites"]]


def test_function_level_imports_are_optional_dependencies_or_reviewed_deferrals(report):
    plain = [(m, t) for m, t in _sites(report)
             if t.split(".")[0] not in import_graph.OPTIONAL and (m, t) not in DEFERRED_IMPORTS]
    assert not plain, ("function-level imports of tracejit or the standard library: import at module level (only "
                       f"optional dependencies are imported inside functions; fix a cycle by moving code): {plain}")
    stale = [k for k in DEFERRED_IMPORTS if k not in _sites(report)]
    assert not stale, f"these reviewed deferred imports are gone: remove them from DEFERRED_IMPORTS: {stale}"


def test_every_lazy_module_is_reviewed(report):
    found = [(site.split(":")[0], site.split(" -> ")[1].split(" ")[0]) for site in report["lazy_import_sites"]
             if site.endswith("(LazyModule)")]
    new = [k for k in found if k not in LAZY_MODULES]
    assert not new, f"LazyModule imports not reviewed (import at module level, or add them with a reason): {new}"
    stale = [k for k in LAZY_MODULES if k not in found]
    assert not stale, f"these reviewed lazy modules are gone: remove them from LAZY_MODULES: {stale}"


def test_every_function_level_import_says_why(report):
    assert not report["uncommented_function_imports"], (
        "function-level imports without a comment (on the statement or the line above) saying why they wait: "
        f"{report['uncommented_function_imports']}")


def _write_package(tmp_path, files):
    package = tmp_path / "tracejit"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return package


def test_the_measure_sees_cycles_upward_edges_and_hidden_imports(tmp_path):
    """The script finds a cycle through a relative import and ``from . import submodule``, ignores one
    closed only inside a function (but counts it apart), and names an upward edge by the layer order."""
    package = _write_package(tmp_path, {
        "__init__.py": "",
        "ir/__init__.py": "",
        "ir/graph.py": "from ..runtime import traced\n",
        "runtime/__init__.py": "",
        "runtime/traced.py": "from ..ir import graph\nimport os\n",
        "serialize/__init__.py": "from . import archive\n",
        "serialize/archive.py": "def f():\n    from ..viewer import html\n    import onnx  # optional\n",
        "serialize/extra.py": "def g():\n    # the reason, on the line above\n    import os\n",
        "viewer/__init__.py": "",
        "viewer/html.py": "from ..serialize import archive\n",
    })
    result = import_graph.report(package)
    assert result["cycles"] == [["tracejit.ir.graph", "tracejit.runtime.traced"]]
    assert ["tracejit.serialize.archive", "tracejit.viewer.html"] in \
        result["cycles_with_function_imports"]
    assert ("tracejit.ir.graph", "tracejit.runtime.traced") in result["upward_edges"]
    assert ("tracejit.runtime.traced", "tracejit.ir.graph") not in result["upward_edges"]
    assert result["hidden_upward_edges"] == [("tracejit.serialize.archive", "tracejit.viewer.html")]
    assert result["function_imports"] == 3 and result["function_imports_optional"] == 1
    assert result["uncommented_function_imports"] == ["tracejit.serialize.archive:2 -> tracejit.viewer.html"]


def test_the_measure_sees_lazy_modules_and_declared_tables(tmp_path):
    """A ``LazyModule(".name", __package__)`` and an entry of a declared table (lazy_names' LAZY, relative to the
    package; a backend table's absolute names) are edges: a cycle or an upward edge they close is found, though no
    import statement closes it; a string in any other dict is not an edge."""
    package = _write_package(tmp_path, {
        "__init__.py": "",
        "lazy_module.py": "",
        "runtime/__init__.py": "",
        "runtime/traced.py": "from ..lazy_module import LazyModule\n_v = LazyModule('..viewer.html', __package__)\n",
        "viewer/__init__.py": "",
        "viewer/html.py": "from ..runtime import traced\n",
        "backends/__init__.py": "",
        "backends/protocol.py": "BACKENDS: dict = {'a': 'tracejit.backends.one'}\nOTHER = {'b': 'tracejit.backends.two'}\n",
        "backends/one.py": "from . import protocol\n",
        "backends/two.py": "from . import protocol\n",
        "lazy_names.py": "LAZY = {'trace': '.api', 'trace_module': '.api'}\n",
        "api.py": "",
    })
    result = import_graph.report(package)
    assert result["cycles"] == []
    hidden = result["cycles_with_function_imports"]
    assert ["tracejit.runtime.traced", "tracejit.viewer.html"] in hidden
    assert ["tracejit.backends.one", "tracejit.backends.protocol"] in hidden
    assert not any("tracejit.backends.two" in c for c in hidden)
    assert ("tracejit.runtime.traced", "tracejit.viewer.html") in result["hidden_upward_edges"]
    assert result["lazy_import_sites"] == [
        "tracejit.backends.protocol:1 -> tracejit.backends.one (BACKENDS)",
        "tracejit.lazy_names:1 -> tracejit.api (LAZY)",
        "tracejit.runtime.traced:2 -> tracejit.viewer.html (LazyModule)"]
    assert result["function_imports"] == 0


def test_the_measure_counts_long_files(tmp_path):
    package = _write_package(tmp_path, {"__init__.py": "", "big.py": "x = 1\n" * 401, "small.py": "x = 1\n" * 400})
    assert import_graph.report(package)["long_files"] == [("tracejit/big.py", 401)]
