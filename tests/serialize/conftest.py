"""Shared helpers for the save/load tests: rebuild a saved file with edits and a correct checksum
(the file surgery itself, split / parse / fix_crc, is tests/filesurgery.py), and a few models.
"""
from __future__ import annotations

import collections
import io
import json
import struct
import warnings

import sys

import pytest
import torch
from torch import nn

import tracejit
from filesurgery import assemble, doc_text, fix_crc, parse, rewrite, split  # noqa: F401  (re-exported to the tests)

# The test modules import these helpers as ``from serialize_testlib import ...``: pytest imports a
# directory's conftest before the test modules in it, and this alias works with every import mode
# and cannot collide with another directory's conftest or helper module.
sys.modules.setdefault("serialize_testlib", sys.modules[__name__])


# ---------------------------------------------------------------------------------------------
# file surgery
# ---------------------------------------------------------------------------------------------

def to_bytes(traced, **kw) -> bytes:
    buf = io.BytesIO()
    tracejit.save(traced, buf, **kw)
    return buf.getvalue()


def load_bytes(raw: bytes, **kw):
    return tracejit.load(io.BytesIO(raw), **kw)


def raw_file(header: dict, data: bytes, crc: bool = True) -> bytes:
    """A file from a hand-made safetensors header (for lies safetensors itself would not write)."""
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    raw = struct.pack("<Q", len(text)) + text + data
    return fix_crc(raw) if crc else raw


def graphs(doc):
    """Every method graph of a program document (a graph table, or graphs inline per method)."""
    p = doc["program"]
    if isinstance(p.get("graphs"), list):
        return p["graphs"]
    if p["kind"] == "function":
        return [p["methods"][""]["forward"]]
    return [g for m in p["modules"] for _, g in m["methods"]]


def method_graph(doc, path: str, method: str):
    """The graph of ``method`` of the module at ``path`` (entries hold a graph or a table index)."""
    p = doc["program"]
    if p["kind"] == "function":
        m = p["methods"]
        ref = m[""][method] if isinstance(m, dict) else dict(m)[method]
    else:
        ref = dict(next(m for m in p["modules"] if m["path"] == path)["methods"])[method]
    return p["graphs"][ref] if isinstance(ref, int) else ref


def first_node(doc, pred):
    for g in graphs(doc):
        for n in g["nodes"]:
            if pred(n):
                return n
    raise AssertionError("no such node")


# load's last-resort net turns an internal error on a malformed file into a LoadError with this
# prefix: a message that cannot say what is wrong, so a check should have caught the file first
LAST_RESORT = "the program is malformed ("


def expect_load_error(raw: bytes, *needles, **kw) -> str:
    """Loading must raise tracejit.LoadError (nothing else) whose message holds every needle and
    comes from a check that recognised the problem (not from the last-resort net)."""
    with pytest.raises(tracejit.LoadError) as info:
        load_bytes(raw, **kw)
    msg = str(info.value)
    assert not msg.startswith(LAST_RESORT), f"no check recognised this file: {msg}"
    for needle in needles:
        assert needle.lower() in msg.lower(), f"{needle!r} not in LoadError message: {msg}"
    return msg


# ---------------------------------------------------------------------------------------------
# comparison helpers
# ---------------------------------------------------------------------------------------------

def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in out for t in flat(out[k])]
    return [t for o in out for t in flat(o)]


def assert_same(actual, expected, tol=1e-5):
    a, e = flat(actual), flat(expected)
    assert len(a) == len(e)
    for x, y in zip(a, e):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


def assert_moves(out1, out2, margin=1e-3):
    """The outputs for two inputs differ by more than the comparison tolerance (the inputs matter)."""
    a, b = flat(out1), flat(out2)
    assert any(x.shape != y.shape or (x - y).abs().max().item() > margin for x, y in zip(a, b))


def quiet_trace(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(*args, **kw)


# ---------------------------------------------------------------------------------------------
# a small function used by the bad-file and fuzz tests
# ---------------------------------------------------------------------------------------------

class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        y = self.bn(self.conv(x)).relu()
        return self.fc(y.mean(dim=(2, 3)))


@pytest.fixture(scope="session")
def small_net():
    torch.manual_seed(0)
    net = SmallNet().eval()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 1.5)
    traced = tracejit.trace(net, torch.randn(2, 2, 5, 5))
    return net, traced, to_bytes(traced)


@pytest.fixture(scope="session")
def small_fn():
    w = torch.linspace(-1, 1, 4)
    traced = quiet_trace(lambda x, y: torch.add(x, y, alpha=2) * w, (torch.randn(4), torch.randn(4)))
    return traced, to_bytes(traced)


Pair = collections.namedtuple("Pair", ["a", "b"])
