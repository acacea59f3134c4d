"""``import tracejit`` imports what loading and calling need, the rest on first use (tracejit/lazy_names.py,
issue #22 item 4). Each check runs in a fresh process, where the first use really is the first: what is in
``sys.modules``, that a trace started by any public name still installs every stand-in (a refused read stays
refused), that ``tracejit.trace`` stays the function when the loader imports the subpackage ``tracejit/trace/``,
and 8 threads touching ``tracejit.trace`` and ``tracejit.load`` first at the same time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tracejit

# the tracer, the inference passes with their numpy / oneDNN kernels, the exporters, the viewer, migrate, the
# CLI and the transformers helpers: none is needed to load and call a saved program
DEFERRED = ("tracejit.api", "tracejit.trace.api", "tracejit.trace.recorder", "tracejit.trace.python_state",
            "tracejit.trace.numpy_reads", "tracejit.trace.calls", "tracejit.runtime.checker", "tracejit.inference",
            "tracejit.passes.pipeline", "tracejit.passes.numpy_regions", "tracejit.kernels.numpy_kernel",
            "tracejit.kernels.onednn_linear", "tracejit.export", "tracejit.viewer", "tracejit.migrate",
            "tracejit.cli", "tracejit.hf", "tracejit.patch", "onnx", "onnxruntime", "onnxscript", "openvino",
            "transformers", "numexpr",
            # the writer (serialize.save) and what it writes with, the backend choice of an AutoProgram (read only
            # where the file holds one), ISA-L's CRC (imported for buffers of 1 MiB and more: this file is smaller)
            "tracejit.serialize.archive", "tracejit.serialize.atomic_file", "tracejit.auto_backend", "isal",
            # the recorder's stand-ins (trace/guards.py imports them all, numpy.random among them: ~45 ms); the
            # loader's schema upgrade takes the training guard from ir/guard_nodes.py
            "tracejit.trace.guards", "tracejit.trace.patches", "numpy.random",
            # what only a retrace of a live object (or .inlined_graph, an in-place undo plan) needs: the inliner and
            # the passes package, the retrace's private random state and module state (bench/RESULTS.md, load9)
            "tracejit.passes", "tracejit.runtime.private_rng", "tracejit.runtime.state", "tracejit.compat",
            # .to() / .program of a traced module, a custom autograd Function's node (the Guarded model has none)
            "tracejit.runtime.constants", "tracejit.runtime.program_of", "tracejit.support.no_backward")


# Default-deny for the load path: the tracejit modules ``import tracejit; tracejit.load(f)`` and a call may
# import. Whole packages the loader and the runtime are made of, and by name the few modules of the layers beside
# them that it reads (their tables: trace/ops.py, trace/boundary.py, ...). Any other module (a new one in trace/,
# passes/, export/, kernels/, backends/, cli/, a new top-level one) fails the test below until it is added here on
# purpose: each costs a server's start 0.06-0.4 ms (bench/RESULTS.md, "Server start").
LOAD_PATH_PACKAGES = ("tracejit.codegen", "tracejit.ir", "tracejit.ops", "tracejit.runtime", "tracejit.serialize",
                      "tracejit.support")
LOAD_PATH_MODULES = frozenset({
    "tracejit", "tracejit.errors", "tracejit.escape", "tracejit.gc_pause", "tracejit.lazy_module",
    "tracejit.lazy_names",
    "tracejit.patterns", "tracejit.porting", "tracejit.program", "tracejit.pytree", "tracejit.records",
    "tracejit.user_methods", "tracejit.version",
    "tracejit.trace", "tracejit.trace.indexing", "tracejit.trace.ledger", "tracejit.trace.ops",
    "tracejit.trace.source"})


def _off_the_load_path(names) -> list:
    """The modules of ``names`` a load may not import: tracejit's outside LOAD_PATH_*, and every DEFERRED one."""
    def on_path(m):
        return m in LOAD_PATH_MODULES or m in LOAD_PATH_PACKAGES or m.startswith(tuple(p + "." for p in
                                                                                     LOAD_PATH_PACKAGES))
    return sorted(m for m in names if (m.split(".")[0] == "tracejit" and not on_path(m))
                  or any(m == d or m.startswith(d + ".") for d in DEFERRED))


def _child(code: str, *args: str) -> list:
    """Run ``code`` in a fresh interpreter (this tree's tracejit); its last stdout line, parsed as JSON."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x, mask):
        return self.b(self.a(x).relu() * mask)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("lazy") / "small.tjit"
    torch.manual_seed(0)
    model = Small().eval()
    tracejit.save(tracejit.trace(model, (torch.randn(2, 8), torch.ones(2, 8)), strict=False), path)
    return model, path


class Guarded(torch.nn.Module):
    """What a load of a real model meets: a submodule's training flag (a guard), a size read, a dict output."""

    def __init__(self):
        super().__init__()
        self.a, self.drop = torch.nn.Linear(8, 8), torch.nn.Dropout(0.1)

    def forward(self, x, mask):
        return {"y": (self.drop(self.a(x)) * mask).softmax(-1)[:, : x.shape[0] + 1]}


def test_import_loads_and_calls_without_the_tracer_exporters_viewer_or_optional_libraries(tmp_path):
    """``import tracejit``, ``tracejit.load(f)`` and a call import no module outside LOAD_PATH_*: not the tracer,
    the inference passes, the exporters, the viewer, migrate, the CLI or an optional library. Guards a server's
    start (issue #22 item 4) against an import moved to module level anywhere on the path (issue #24 item 5)."""
    path = tmp_path / "guarded.tjit"
    model = Guarded().eval()
    tracejit.save(tracejit.trace(model, (torch.randn(2, 8), torch.ones(2, 8)), strict=False), path)
    got = _child("""
        import json, sys, torch
        before = set(sys.modules)
        import tracejit
        after_import = sorted(set(sys.modules) - before)
        program = tracejit.load(sys.argv[1])
        out = program(torch.arange(24.0).reshape(3, 8) / 10, torch.ones(3, 8))["y"]
        after_call = sorted(set(sys.modules) - before)
        # what the load path leaves to first use (LazyModules) works when first used: .inlined_graph, .to(), .program
        later = [len(program.inlined_graph.nodes) > 0, program.to("cpu") is program, program.program.kind,
                 program(torch.arange(24.0).reshape(3, 8) / 10, torch.ones(3, 8))["y"].tolist() == out.tolist()]
        print(json.dumps([after_import, after_call, out.tolist(), callable(tracejit.trace),
                          type(sys.modules["tracejit"].__dict__.get("trace")).__name__, later]))
    """, str(path))
    after_import, after_call, out, trace_is_callable, dict_entry, later = got
    assert later == [True, True, "module", True]
    assert "tracejit.porting" in after_import and "tracejit.runtime.traced" in after_import   # the load path is there
    assert "tracejit.serialize.loader" in after_call and "tracejit.ir.guard_nodes" in after_call   # guards' too
    assert _off_the_load_path(after_import) == [] and _off_the_load_path(after_call) == [], \
        "imported by a load, off its path (tests/serve/test_lazy_import.py, LOAD_PATH_MODULES)"
    # the loader imported the subpackage tracejit/trace/ (its ledger), and tracejit.trace is still the function
    assert dict_entry == "module" and trace_is_callable
    x = torch.arange(24.0).reshape(3, 8) / 10   # another batch size: 4 columns where the trace had 3
    want = model(x, torch.ones(3, 8))["y"].detach()
    assert want.shape == (3, 4)
    torch.testing.assert_close(torch.tensor(out), want)


def test_the_load_path_check_names_a_module_off_the_path():
    """The check above flags what it must: a tracer module, a pass, an exporter, a new top-level module, an
    optional library; and passes the loader's own."""
    assert _off_the_load_path(["tracejit.trace.recorder", "tracejit.passes.cse", "tracejit.export.lowering",
                               "tracejit.new_module", "onnx.helper", "tracejit.serialize.loader", "tracejit.ir.graph",
                               "tracejit.trace.ops", "torch.nn", "tracejit.runtime.checker"]) == [
        "onnx.helper", "tracejit.export.lowering", "tracejit.new_module", "tracejit.passes.cse",
        "tracejit.runtime.checker", "tracejit.trace.recorder"]


@pytest.mark.parametrize("first", ["trace", "trace_module", "optimize_for_inference", "export_onnx", "is_tracing"])
def test_a_trace_after_any_first_use_still_refuses_python_randomness_and_clocks(first):
    """The stand-ins that refuse random.random(), numpy.random and time.time() in forward are registered by the
    modules trace/api.py imports; whichever name is touched first, they are in place before the first trace."""
    got = _child(f"""
        import json, random, time, numpy as np, torch
        import tracejit
        getattr(tracejit, {first!r})   # the first use of a lazy name
        seen = []
        for read in (lambda x: x * random.random(), lambda x: x * float(np.random.rand()),
                     lambda x: x + time.time() % 1.0):
            try:
                tracejit.trace(read, torch.ones(2))
                seen.append("traced")
            except tracejit.TraceError as e:
                seen.append(str(e).splitlines()[1].split(": ", 1)[1].split(";")[0])
        print(json.dumps(seen))
    """)
    assert got == ["random.random()", "numpy.random.rand()", "time.time()"]


def test_tracejit_trace_and_migrate_stay_the_functions_and_can_be_replaced():
    got = _child("""
        import json, sys, torch
        import tracejit
        import tracejit.trace.recorder   # binds the subpackage as the package's attribute, if it were first
        first = callable(tracejit.trace) and tracejit.trace.__module__
        import tracejit.trace.python_state
        real = tracejit.trace
        tracejit.trace = lambda *a, **k: "replaced"   # what a monkeypatch does
        replaced = tracejit.trace(None)
        tracejit.trace = real
        out = tracejit.trace(lambda x: x * 2, torch.ones(2))(torch.arange(3.0)).tolist()
        del tracejit.trace
        try:
            del tracejit.trace
            twice = "deleted twice"
        except AttributeError:
            twice = "AttributeError"
        import tracejit.migrate.cli   # the subpackage tracejit/migrate/ likewise
        print(json.dumps([first, replaced, out, tracejit.trace is real, twice,
                          sorted(n for n in tracejit.__all__ if not hasattr(tracejit, n)),
                          tracejit.migrate.__module__, sys.modules["tracejit.migrate"].migrate is tracejit.migrate]))
    """)
    assert got == ["tracejit.api", "replaced", [0.0, 2.0, 4.0], True, "AttributeError", [], "tracejit.migrate", True]


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'tracejit' has no attribute 'not_a_name'"):
        tracejit.not_a_name   # noqa: B018
    assert not hasattr(tracejit, "_private_thing")
    assert {"trace", "load", "optimize_for_inference", "export_onnx"} <= set(dir(tracejit))


def test_eight_threads_touching_trace_and_load_first_at_once(saved):
    """In a fresh process, 4 threads trace (and 2 of them try a refused random.random()) while 4 load and call,
    all released by one barrier, each first touching its name: every result equals eager, every refusal
    happens, and the collector is back on after (the counted pause of gc_pause.py)."""
    model, path = saved
    got = _child("""
        import gc, json, random, sys, threading, torch
        import tracejit
        barrier, results = threading.Barrier(8), {}

        def tracer(i):
            barrier.wait()
            f = (lambda x: x * random.random()) if i % 2 else (lambda x: (x * (i + 2)).relu())
            try:
                traced = tracejit.trace(f, torch.ones(3))
                results[i] = traced(torch.arange(-2.0, 3.0)).tolist()
            except tracejit.TraceError as e:
                results[i] = "refused" if "random.random()" in str(e) else repr(e)

        def loader(i):
            barrier.wait()
            program = tracejit.load(sys.argv[1])
            results[i] = program(torch.arange(40.0).reshape(5, 8) / 10, torch.ones(5, 8)).tolist()

        threads = [threading.Thread(target=tracer if i < 4 else loader, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(json.dumps([results.get(i) for i in range(8)] + [gc.isenabled()]))
    """, str(path))
    *results, collector_on = got
    for i in (0, 2):
        assert results[i] == torch.arange(-2.0, 3.0).mul(i + 2).relu().tolist()
    assert results[1] == results[3] == "refused"
    want = model(torch.arange(40.0).reshape(5, 8) / 10, torch.ones(5, 8)).detach()
    for out in results[4:]:
        torch.testing.assert_close(torch.tensor(out), want)
    assert collector_on is True


@pytest.mark.parametrize("cache", ["first load", "from the code cache"])
def test_the_load_path_runs_no_dataclass_decorator_and_compiles_no_pattern_at_import(saved, cache, tmp_path,
                                                                                  monkeypatch):
    """``import tracejit; tracejit.load(f)`` builds no class with ``@dataclass`` (~0.6 ms each: records.py) and
    every module-level regular expression of the modules it imports is a LazyPattern (patterns.py), compiled
    only where the load uses it: neither cost comes back to a server's start unnoticed. Both the first load
    of the file (the validator and the code generator imported) and one from the code cache (neither)."""
    model, path = saved
    monkeypatch.setenv("TRACEJIT_CACHE_DIR", str(tmp_path / "code-cache"))   # empty: the first child compiles
    if cache == "from the code cache":
        tracejit.load(path)   # writes the entry the child loads from
    got = _child("""
        import dataclasses, json, re, sys, torch
        made = []
        real = dataclasses._process_class
        def counted(cls, *args, **kwargs):
            made.append(f"{cls.__module__}.{cls.__qualname__}")
            return real(cls, *args, **kwargs)
        dataclasses._process_class = counted
        import tracejit
        from tracejit.patterns import LazyPattern
        compiled_at_import = sorted(f"{n}.{k}" for n, m in list(sys.modules.items()) if n.startswith("tracejit")
                                    for k, v in vars(m).items() if isinstance(v, LazyPattern) and v._compiled)
        program = tracejit.load(sys.argv[1])
        out = program(torch.arange(24.0).reshape(3, 8) / 10, torch.ones(3, 8))
        eager_patterns = sorted(f"{n}.{k}" for n, m in list(sys.modules.items()) if n.startswith("tracejit")
                                for k, v in vars(m).items() if isinstance(v, re.Pattern))
        lazy = [v for n, m in list(sys.modules.items()) if n.startswith("tracejit")
                for v in vars(m).values() if isinstance(v, LazyPattern)]
        print(json.dumps([[m for m in made if m.startswith("tracejit")], compiled_at_import, eager_patterns,
                          len(lazy), sum(v._compiled is None for v in lazy), out.tolist()]))
    """, str(path))
    dataclasses_made, compiled_at_import, eager_patterns, n_lazy, n_never_compiled, out = got
    assert dataclasses_made == [] and compiled_at_import == [] and eager_patterns == []
    # the escaping, autocast, state-test, guard-format, CRC and name-escaping ones are there, and none compiles: the
    # load path's name checks are string tests (patterns.py; tests/arch/test_name_tests.py)
    assert n_lazy >= (8 if cache == "first load" else 5) and n_never_compiled == n_lazy
    torch.testing.assert_close(torch.tensor(out), model(torch.arange(24.0).reshape(3, 8) / 10,
                                                        torch.ones(3, 8)).detach())


def test_a_lazy_pattern_matches_as_the_compiled_one_from_any_thread():
    import re
    import threading

    from tracejit.patterns import LazyPattern
    texts = ["aten::add.Tensor", "aten::add", "bad name", "x::y.z", ""] * 20
    want = [bool(re.match(r"^([a-z_]+)::([A-Za-z_]\w*)(?:\.(\w+))?$", t)) for t in texts]
    lazy, barrier, got = LazyPattern(r"^([a-z_]+)::([A-Za-z_]\w*)(?:\.(\w+))?$"), threading.Barrier(8), {}

    def run(i):
        barrier.wait()
        got[i] = [bool(lazy.match(t)) for t in texts]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[i] == want for i in range(8)) and lazy.pattern.startswith("^([a-z_]+)")
    assert LazyPattern("a|b").sub("-", "cab") == "c--" and "LazyPattern('a|b')" == repr(LazyPattern("a|b"))


def test_a_lazy_module_imports_on_first_attribute_read_once_across_threads():
    """LazyModule (issue #24 item 5): creating one imports nothing, nor does dunder probing (copy, pickle); the first
    attribute read imports the module, and eight threads reading first at the same time all get the module's own
    attribute."""
    found = _child("""
        import json, sys, threading
        from tracejit.lazy_module import LazyModule
        name = "tracejit.serialize.archive"
        lazy = LazyModule(".serialize.archive", "tracejit")
        states = [name in sys.modules]
        states += [hasattr(lazy, "__deepcopy__"), name in sys.modules]
        got, gate = [], threading.Barrier(8)
        def read():
            gate.wait()
            got.append(lazy.save)
        threads = [threading.Thread(target=read) for _ in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        same = all(f is sys.modules[name].save for f in got)
        print(json.dumps(states + [name in sys.modules, len(got), same, "not imported" in repr(LazyModule("x"))]))
    """)
    assert found == [False, False, False, True, 8, True, True]


def test_without_the_onnx_extra_tracing_loading_and_export_errors_still_work(saved):
    """The ONNX exporter is a LazyModule behind ``tracejit.export.export_onnx`` (issue #24 item 5): where onnx,
    onnxscript, onnx-ir and onnxruntime cannot be imported, a program still traces, loads and runs,
    ``tracejit.ExportError`` imports, and an export raises an ImportError that names the extra to install."""
    found = _child("""
        import importlib.abc, json, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("onnx", "onnxscript", "onnx_ir", "onnxruntime"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Block())
        import torch, tracejit
        from tracejit.export import ExportError
        traced = tracejit.trace(lambda x: x * 2, torch.ones(2))
        loaded = tracejit.load(sys.argv[1])
        try:
            tracejit.export_onnx(traced)
            message = None
        except ImportError as e:
            message = str(e)
        print(json.dumps([traced(torch.ones(3)).tolist(), list(loaded(torch.ones(2, 8), torch.ones(2, 8)).shape),
                          ExportError is tracejit.ExportError, message]))
    """, str(saved[1]))
    assert found[:3] == [[2.0, 2.0, 2.0], [2, 2], True]
    assert "pip install 'tracejit[onnx]'" in found[3]
