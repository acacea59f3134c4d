"""Shared helpers of the hostile-file tests: real saved programs, document surgery with the CRC
recomputed (a CRC is integrity, not authenticity: an attacker recomputes it), and a runner that
loads many files in one child process under memory and CPU limits (tests/security/sandbox_child.py).

The test modules import these as ``from security_testlib import ...``.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import tracejit
import filesurgery
from filesurgery import fix_crc, parse, split  # noqa: F401  (re-exported to the tests)

sys.modules.setdefault("security_testlib", sys.modules[__name__])

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# ------------------------------------------------------------------------------------------ counting work
class CheapSin(TorchDispatchMode):
    """Runs ``sin`` as the identity and counts how many ran (the tests count work, not seconds; reset ``ran``)."""
    ran = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.sin.default, torch.ops.aten.sin_.default):
            CheapSin.ran += 1
            return args[0]
        return func(*args, **(kwargs or {}))


def load_bytes(raw: bytes):
    """``tracejit.load`` of a file's bytes."""
    return tracejit.load(io.BytesIO(raw))


# ------------------------------------------------------------------------------------------ programs
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return self.drop(self.bn(self.conv(x)).relu())


class Net(nn.Module):
    """Submodules, a parameter, BatchNorm, dropout, slicing, a view and a masked -inf."""

    def __init__(self):
        super().__init__()
        self.block = Block()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        y = self.block(x)[:, :, 1:4]
        z = self.fc(y.mean(dim=(2, 3)))
        return z.masked_fill(z > 5, float("-inf")).view(-1)


NET_INPUTS = "7:2,2,5,5"
FN_INPUTS = "7:4;4"


def _inputs(spec):
    seed, _, shapes = spec.partition(":")
    g = torch.Generator().manual_seed(int(seed))
    return [torch.randn(*[int(d) for d in s.split(",")], generator=g) for s in shapes.split(";")]


def output_sum(obj, spec) -> float:
    with torch.no_grad():
        res = obj(*_inputs(spec))
    return sum(float(t.double().sum()) for t in (res if isinstance(res, (tuple, list)) else [res]))


def to_bytes(traced) -> bytes:
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    return buf.getvalue()


def traced_bytes(fn, example: tuple) -> bytes:
    """The file of ``tracejit.trace(fn, example)`` (its warnings silenced): what an attack edits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_bytes(tracejit.trace(fn, example))


def both(*edits):
    """One document edit made of several, applied in order."""
    def edit(doc):
        for e in edits:
            e(doc)
    return edit


@pytest.fixture(scope="session")
def bases():
    """{"net": (traced, file bytes, input spec), "fn": ...}: real saves to edit."""
    return make_bases()


def make_bases() -> dict:
    """The ``bases`` fixture's value (also for scripts/hostile_sweep.py)."""
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.block.bn.running_mean.uniform_(-0.5, 0.5)
        net.block.bn.running_var.uniform_(0.5, 1.5)
    w = torch.linspace(-1, 1, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tnet = tracejit.trace(net, torch.randn(2, 2, 5, 5))
        tfn = tracejit.trace(lambda x, y: torch.add(x, y, alpha=2) * w, (torch.randn(4), torch.randn(4)))
    return {"net": (tnet, to_bytes(tnet), NET_INPUTS), "fn": (tfn, to_bytes(tfn), FN_INPUTS)}


# ------------------------------------------------------------------------------------------ surgery
def assemble(doc, tensors, edit_text=None) -> bytes:
    """filesurgery.assemble, keeping non-ASCII text as UTF-8 (hostile names are written raw)."""
    return filesurgery.assemble(doc, tensors, edit_text, ensure_ascii=False)


def rewrite(raw: bytes, edit_doc=None, edit_tensors=None, edit_text=None) -> bytes:
    """The file with ``edit_doc(doc)`` / ``edit_tensors(tensors)`` applied in place and the CRC fixed."""
    return filesurgery.rewrite(raw, edit_doc, edit_tensors, edit_text, ensure_ascii=False)


def graphs(doc):
    return doc["program"]["graphs"]


def nodes(doc):
    return [n for g in graphs(doc) for n in g["nodes"]]


def node(doc, pred):
    """The first node for which ``pred(node)`` holds (pred may take an op-name prefix)."""
    if isinstance(pred, str):
        prefix = pred
        pred = lambda n: n["op"].startswith(prefix)  # noqa: E731
    return next(n for n in nodes(doc) if pred(n))


def module(doc, path: str):
    return next(m for m in doc["program"]["modules"] if m["path"] == path)


def payload(canary: str, quote: str = "'") -> str:
    """Python that creates the canary file if it is ever run."""
    return f"__import__({quote}pathlib{quote}).Path({quote}{canary}{quote}).touch()"


def dotless_payload(canary: str) -> str:
    """The payload without a '.', for names the loader splits at dots."""
    path = f"str(bytes({list(canary.encode())}),'ascii')"
    return f"getattr(getattr(__import__('pathlib'),'Path')({path}),'touch')()"


def injections(canary: str) -> list[str]:
    """Strings that run the payload if spliced into generated source in any position."""
    p, q, d = payload(canary), payload(canary, '"'), dotless_payload(canary)
    return [p, f"x=1): {p} #", f"a']; {p}; x=['", f'a"]; {q}; x=["', f"a\n    {p}\n", f"__class__.{p}",
            f"forward(self):\n  {p}\n  def f", f"a']; {d}; x=['", f"a')({d})#"]


# ------------------------------------------------------------------------------------------ children
def cost_and_canary(name: str, r: dict, cpu_s: float) -> list[str]:
    """What a child's report ``r`` of file ``name`` says went wrong beyond its outcome: more than ``cpu_s`` CPU
    seconds to load and call it, or the canary (code from the file ran)."""
    problems = []
    if r["load_cpu_s"] + r.get("call_cpu_s", 0.0) > cpu_s:
        problems.append(f"{name}: {r['load_cpu_s'] + r.get('call_cpu_s', 0.0):.2f} CPU seconds")
    if r["canary"]:
        problems.append(f"{name}: the canary appeared")
    return problems


def run_child(tmp_path, cases: list[dict], canary: str, mem_mb: int = 400, cpu_s: int = 300) -> dict:
    """Load every case in one child process; {name: report}. A crash (signal) fails the test, naming
    the file that caused it."""
    jobs = []
    for i, case in enumerate(cases):
        path = case.get("path")
        if path is None:
            path = str(tmp_path / f"case{i}.tjit")
            with open(path, "wb") as f:
                f.write(case["raw"])
        jobs.append({k: v for k, v in case.items() if k != "raw"} | {"path": path})
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps({"canary": canary, "mem_mb": mem_mb, "cpu_s": cpu_s, "jobs": jobs}))
    report = tmp_path / "report.jsonl"
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "sandbox_child.py"), str(spec), str(report)],
                          env=env, capture_output=True, text=True, timeout=600)
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    started = [x["start"] for x in lines if "start" in x]
    done = {x["done"]: x for x in lines if "done" in x}
    if proc.returncode != 0:
        last = started[-1] if started else None
        pytest.fail(f"the child died (exit status {proc.returncode}) while loading {last!r}: {proc.stderr[-2000:]}")
    assert len(done) == len(cases), f"the child reported {len(done)} of {len(cases)} cases: {proc.stderr[-2000:]}"
    return done


def run_cli(*args, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "tracejit", *args], env=env, capture_output=True, timeout=timeout)


def round_problems(tmp_path, cases: list, legit: list, cpu_s: float = 2.0) -> list[str]:
    """Run an attack round's catalogue (``(name, raw, inputs, expect)`` hostile cases, ``(name, raw, inputs, want)``
    legitimate ones) in a capped child and list what went wrong: a "reject" case that loaded, a "call_refused"
    case whose call was not a BudgetError / GuardError, a case over ``cpu_s`` CPU seconds or one whose canary
    appeared, a legitimate program that did not load and answer as eager."""
    jobs = [{"name": n, "raw": raw, "inputs": spec} for n, raw, spec, _ in cases]
    jobs += [{"name": n, "raw": raw, "inputs": spec, "expect_sum": want} for n, raw, spec, want in legit]
    report = run_child(tmp_path, jobs, str(tmp_path / "canary"), mem_mb=400, cpu_s=60)
    problems = []
    for name, _, _, expect in cases:
        r = report[name]
        got = f"{r['outcome']} {r.get('message', '')} call={r.get('call')} {r.get('call_message', '')}"
        if expect == "reject" and r["outcome"] != "load_error":
            problems.append(f"{name}: expected a LoadError, got {got}")
        # round 27: a file whose traced call alone claims more work than its tensors and traced inputs allow is
        # refused earlier, at load (support/call_budget.Allowance.claim)
        claimed = r["outcome"] == "load_error" and "its traced call would compute" in r.get("message", "")
        if expect == "call_refused" and not claimed and (
                r["outcome"] != "loaded" or r.get("call") not in ("raised BudgetError", "raised GuardError")):
            problems.append(f"{name}: expected the call to be refused, got {got}")
        problems += cost_and_canary(name, r, cpu_s)
    for name, *_ in legit:
        if report[name]["outcome"] != "loaded" or report[name].get("call") != "same":
            problems.append(f"{name}: {report[name]}")
    return problems
