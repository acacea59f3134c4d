"""The ``tracejit`` command line (tracejit/cli/), run as ``python -m tracejit`` in a subprocess.

Starting a Python that imports torch costs seconds, so the subprocesses are few (five) and run
concurrently: one fixture runs them all (trace and two error cases first, then inspect and run on
the traced file), once per test run (tests/once_per_run.py: one xdist worker runs them, the others
reads what they printed), and the tests check what they printed. The other error cases, ``--help`` and the
usage errors argparse reports are checked in-process through ``tracejit.cli.main``, which exits
the same way.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import tracejit
from tracejit import cli
from once_per_run import each_once_per_run

MODELS = '''\
import torch
from torch import nn


class Flatten(nn.Module):
    def forward(self, x):
        if x.size(0) > 1:          # a size used as a Python int: a ledger entry at this line
            return x.flatten(1)
        return x


def small():
    torch.manual_seed(1)
    shared = nn.Linear(8, 8)
    return nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU(), shared, nn.ReLU(), shared, Flatten())


def not_a_module():
    return 42
'''
LEDGER_LINE = MODELS.splitlines().index("        if x.size(0) > 1:          # a size used as a Python int: a "
                                        "ledger entry at this line") + 1


def _start(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "tracejit", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(procs: dict) -> dict:
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        out[name] = [p.args, p.returncode, stdout, stderr]
    return out


def _run_all(d) -> dict:
    """The five runs in ``d``: what each printed, as JSON (each_once_per_run shares it between workers)."""
    (d / "tjcli_models.py").write_text(MODELS)
    first = _finish({
        "trace": _start(["trace", "tjcli_models:small", "--input", "float32[2,16]", "-o", "small.tjit"], d),
        "missing": _start(["inspect", "missing.tjit"], d),
        "bad_shape": _start(["trace", "tjcli_models:small", "--input", "float32[1,x]", "-o", "x.tjit"], d),
    })
    assert first["trace"][1] == 0, first["trace"][3]
    second = _finish({
        "inspect": _start(["inspect", "small.tjit", "--graph", "--code"], d),
        "run": _start(["run", "small.tjit", "--input", "float32[5,16]", "--repeat", "3"], d),
    })
    return {"dir": str(d), **first, **second}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The five runs, made once per test run (not in each xdist worker: 7-20 s of child processes). Their
    folder is shared and read-only to the tests: a test that writes files works in a copy (``_own_copy``)."""
    done = each_once_per_run(tmp_path_factory, "cli-runs", ["runs"], lambda _, d: _run_all(d))["runs"]
    return {"dir": pathlib.Path(done["dir"]),
            **{name: subprocess.CompletedProcess(*ran) for name, ran in done.items() if name != "dir"}}


def _own_copy(runs, tmp_path):
    """The traced file and the models' source in a folder of this test's own."""
    for name in ("small.tjit", "tjcli_models.py"):
        shutil.copyfile(runs["dir"] / name, tmp_path / name)
    return tmp_path


def _factory_module(d):
    spec = importlib.util.spec_from_file_location("tracejit_cli_test_models", d / "tjcli_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _distinct_tensors(m: torch.nn.Module) -> list:
    return list({id(t): t for t in list(m.parameters()) + list(m.buffers())}.values())


def test_trace_saves_a_program_equal_to_eager(runs):
    d = runs["dir"]
    r = runs["trace"]
    assert (d / "small.tjit").exists()
    eager = _factory_module(d).small().eval()
    loaded = tracejit.load(d / "small.tjit")
    eager.load_state_dict(loaded.state_dict())
    x = torch.randn(7, 16)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), eager(x))
    # the summary: file, size, parameters, ops, ledger
    n_params = sum(p.numel() for p in eager.parameters())        # the shared Linear counted once
    assert "small.tjit" in r.stdout and f"({(d / 'small.tjit').stat().st_size} bytes" in r.stdout
    assert re.search(rf"parameters:\s+{n_params}\b", r.stdout), r.stdout
    assert re.search(r"ops:\s+\d+ nodes", r.stdout) and re.search(r"ledger:\s+2 entries", r.stdout), r.stdout
    assert r.stderr == ""


def test_inspect_describes_the_file(runs):
    d = runs["dir"]
    r = runs["inspect"]
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "forward(input: Float[s0, 16])" in out   # the batch moves in the viewer's meta probe; the width is fixed
    # parameters and buffers: every name once, the shared Linear's tensors counted once in the totals
    eager = _factory_module(d).small()
    tensors = _distinct_tensors(eager)
    total = sum(t.numel() * t.element_size() for t in tensors)
    m = re.search(r"total: (\d+) tensors? .*?, (\d+) bytes", out)
    assert m, out
    assert (int(m.group(1)), int(m.group(2))) == (len(tensors), total)
    assert re.search(r"^\s+0\.weight\s+param\s+\[8, 16\]\s+float32\s+512$", out, re.M), out
    assert re.search(r"^\s+1\.num_batches_tracked\s+buffer\s+\[\]\s+int64\s+8$", out, re.M), out
    assert "3.weight (= 5.weight)" in out
    # the ledger: the size specialization, at its source line
    assert re.search(rf"^\s+size\s+tjcli_models\.py:{LEDGER_LINE}\s+\S", out, re.M), out
    assert re.search(r"^\s+training\s+-\s+", out, re.M), out
    # the op histogram: sorted by count; the shared Linear's graph is one graph, so 2 linear nodes
    hist = re.findall(r"^\s+(\d+)\s+((?:aten|tracejit)::\S+)$", out, re.M)
    counts = {op: int(c) for c, op in hist}
    assert counts["aten::linear.default"] == 2 and counts["aten::batch_norm.default"] == 1, hist
    assert [int(c) for c, _ in hist] == sorted((int(c) for c, _ in hist), reverse=True)
    # the content hash and the stored checksum
    data = (d / "small.tjit").read_bytes()
    assert re.search(r"sha256:\s+([0-9a-f]+)", out).group(1) == hashlib.sha256(data).hexdigest()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    stored = json.loads(header["__metadata__"]["tracejit"])["crc32"]
    assert re.search(r"crc32:\s+([0-9a-f]{8})", out).group(1) == stored
    # --graph and --code: every method, root and submodules
    assert "graph of forward:" in out and "graph of 0.forward:" in out and "aten::linear.default(" in out
    assert "code of forward:" in out and "def forward(self, input):" in out
    assert r.stderr == ""


def test_run_prints_outputs_and_time(runs):
    r = runs["run"]
    assert r.returncode == 0, r.stderr
    assert "output: float32[5, 8]" in r.stdout
    assert re.search(r"median call time: [0-9.]+ ms over 3 calls", r.stdout), r.stdout


@pytest.mark.parametrize("name, code, words", [
    ("missing", 1, "missing.tjit: no such file"),
    ("bad_shape", 2, "'float32[1,x]'"),
])
def test_errors_are_one_line(runs, name, code, words):
    r = runs[name]
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracejit: error: ") and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def _main_fails(argv, capsys) -> tuple:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    captured = capsys.readouterr()
    assert captured.out == ""
    return e.value.code, captured.err


@pytest.mark.parametrize("argv, words", [
    (["trace", "nosuchmodels:small", "--input", "float32[2,16]", "-o", "x.tjit"], "cannot import 'nosuchmodels'"),
    (["trace", "tjcli_models:nothing", "--input", "float32[2,16]", "-o", "x.tjit"], "has no attribute 'nothing'"),
    (["trace", "tjcli_models:not_a_module", "--input", "float32[2,16]", "-o", "x.tjit"],
     "returned a int, not an nn.Module"),
    (["trace", "tjcli_models:small", "--input", "float32[2,15]", "-o", "x.tjit"], "tracing tjcli_models:small failed"),
    (["trace", "tjcli_models:small", "--input", "float32[2,16]", "-o", "no/dir/x.tjit"],
     "cannot save the trace to no/dir/x.tjit: tracejit.save could not create a file in the directory"),  # SaveError
    (["run", "damaged.tjit"], "damaged.tjit: cannot load: checksum mismatch"),     # a LoadError
    (["inspect", "damaged.tjit"], "damaged.tjit: cannot load: checksum mismatch"),
    (["inspect", "junk.tjit"], "junk.tjit: "),
    (["run", "small.tjit", "--input", "float32[2,16,1]"], "shapes cannot be multiplied"),
])
def test_errors_in_process(runs, tmp_path, monkeypatch, capsys, argv, words):
    d = _own_copy(runs, tmp_path)   # the files it writes (damaged, junk) and the imports' caches stay its own
    data = bytearray((d / "small.tjit").read_bytes())
    data[-1] ^= 0x01                     # one flipped bit in the last weight: the checksum catches it
    (d / "damaged.tjit").write_bytes(bytes(data))
    (d / "junk.tjit").write_bytes(b"not a tracejit file at all")
    monkeypatch.chdir(d)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        code, err = _main_fails(argv, capsys)
    finally:
        sys.modules.pop("tjcli_models", None)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("tracejit: error: ") and words in err, err


@pytest.mark.parametrize("argv, words", [
    (["trace", "tjcli_models:small", "--input", "foo[1]", "-o", "x.tjit"], "unknown dtype 'foo'"),
    (["trace", "tjcli_models:small", "--input", "float32[1,-2]", "-o", "x.tjit"], "'-2'"),
    (["trace", "tjcli_models:small", "--input", "float32(1,2)", "-o", "x.tjit"], "expected DTYPE[D0,D1,...]"),
    (["trace", "tjcli_models", "--input", "float32[1]", "-o", "x.tjit"], "expected MODULE:CALLABLE"),
    (["trace", "tjcli_models.py:small", "-o", "x.tjit"], "name the module, not its file (e.g. 'tjcli_models:small')"),
    (["trace", "tjcli_models:small", "--input", "float32[1]"], "--output"),
    (["run", "f.tjit", "--repeat", "0"], "positive integer"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_usage_errors_exit_2_with_one_line(capsys, argv, words):
    code, err = _main_fails(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tracejit: error: ") and words in err, err


def test_input_specs():
    s = cli.parse_input_spec(" int32[ 2, 3 ] ")
    assert (s.dtype, s.shape) == (torch.int32, (2, 3))
    t = s.make()
    assert t.dtype == torch.int32 and t.shape == (2, 3) and 0 <= int(t.min()) and int(t.max()) < 10
    assert cli.parse_input_spec("bool[4]").make().dtype == torch.bool
    assert cli.parse_input_spec("bfloat16[]").make().shape == ()


@pytest.mark.parametrize("argv, words", [
    ([], ["inspect", "trace", "run", "--debug", "--version", "examples:"]),
    (["inspect"], ["FILE", "--graph", "--code", "never runs", "example:"]),
    (["trace"], ["MODULE:CALLABLE", "--input", "--output", "--seed", "float32[1,3,224,224]", "bfloat16",
                 "torch.randint(0, 10)", "example:"]),
    (["run"], ["FILE", "--input", "--repeat", "--seed", "median", "example:"]),
])
def test_help_is_complete(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        cli.main(argv + ["--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for w in words:
        assert w in out, (w, out)


def test_console_script_is_declared():
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert [e.value for e in scripts if e.name == "tracejit"] == ["tracejit.cli:main"]
