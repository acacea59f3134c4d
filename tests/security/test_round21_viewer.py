"""The viewer's page for the round-21 crafted files (catalogue_round21.viewer_cases): the document is built
(no RecursionError), the page stays proportional to the file (no structure or source line repeated per node
of a big graph or per module sharing it) with every shown string cut to viewer/limits.MAX_TEXT, its scripts
intact; and, where node is installed, the page's own script run on a minimal DOM (tests/viewer/page_runner.js)
finishes without an error, draws at most MAX_DRAWN nodes, uses the plain layout for graphs dagre cannot lay
out (a stack overflow, minutes of layout) and says on the page where it cut."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess

import pytest

from catalogue_round21 import viewer_cases
from security_testlib import ROOT, run_cli
from test_tool_files import page_data
from tracejit.serialize import read_program
from tracejit.viewer import program_document, render_html
from tracejit.viewer.limits import MAX_DRAWN, MAX_TEXT

NODE = shutil.which("node")
RUNNER = os.path.join(ROOT, "tests", "viewer", "page_runner.js")
SHOWN = ("label", "type", "source", "structure", "guard", "op", "target")


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("round21_pages")
    out = {}
    for name, raw in viewer_cases():
        html = render_html(program_document(read_program(io.BytesIO(raw), map_location="meta")))
        path = tmp / f"{name}.html"
        path.write_text(html, encoding="utf-8")
        out[name] = (raw, html, path)
    return out


def test_crafted_pages_are_proportional_to_the_file_and_cut_long_text(pages):
    for name, (raw, html, _) in pages.items():
        assert len(html) <= 4 * len(raw) + 300_000, f"{name}: a {len(raw)} byte file made a {len(html)} byte page"
        data = page_data(html)
        for g in data["graphs"].values():
            for n in g["nodes"]:
                long = [k for k in SHOWN if len(str(n.get(k, ""))) > MAX_TEXT]
                assert not long, f"{name}: {long} of a node over {MAX_TEXT} characters"


def test_the_cut_text_says_how_long_it_was(pages):
    _, html, _ = pages["shared_graph_sources_2000"]
    source = next(n["source"] for g in page_data(html)["graphs"].values() for n in g["nodes"] if n.get("source"))
    assert source.startswith("SSSS") and "(4096 characters)" in source


def test_view_of_a_program_nested_600_deep(tmp_path):
    raw = dict(viewer_cases())["nested_600"]
    path = tmp_path / "nested.tjit"
    path.write_bytes(raw)
    done = run_cli("view", str(path), "-o", str(tmp_path / "nested.html"))
    assert done.returncode == 0, done.stderr.decode()[-500:]
    data = page_data((tmp_path / "nested.html").read_text(encoding="utf-8"))
    assert len(data["graphs"]) == 602


def _run_page(path, hash_=""):
    done = subprocess.run([NODE, RUNNER, str(path), hash_], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    return json.loads(done.stdout)


@pytest.mark.skipif(NODE is None, reason="needs node (the page's script runs on a minimal DOM)")
@pytest.mark.parametrize("hash_", ["", "#expand=99", "#search=neg"])
def test_crafted_pages_render(pages, hash_):
    for name, (_, _, path) in pages.items():
        r = _run_page(path, hash_)
        assert r["error"] is None and r["ready"] == "1", f"{name} {hash_}: {r}"
        if name == "no_methods":
            assert r["rendered"] == "0" and "no traced method" in r["stats"], r
            continue
        assert 0 < int(r["rendered"]) <= MAX_DRAWN, f"{name} {hash_}: {r}"
        if name.startswith(("flat_chain", "add_chain")):
            assert r["plain"] == "1", f"{name}: {r}"
    r = _run_page(pages["flat_chain_30000"][2])
    assert "truncated: at most" in r["limits"] and r["rendered"] == str(MAX_DRAWN)
    r = _run_page(pages["nested_600"][2], "#expand=99")
    assert "expansion stopped" in r["limits"], r


@pytest.mark.skipif(NODE is None, reason="needs node (the page's script runs on a minimal DOM)")
def test_a_small_program_keeps_the_full_layout(tmp_path):
    import torch
    import tracejit
    from catalogue_round21 import _Tools
    traced = tracejit.trace(_Tools().eval(), torch.randn(5, 4), strict=False)
    path = tmp_path / "small.html"
    tracejit.view(traced, path)
    r = _run_page(path, "#expand=9")
    assert r["error"] is None and r["plain"] == "0" and r["truncated"] == "0" and r["limits"] == ""
    doc = program_document(traced)

    def visible(key):   # every call expanded: its callee's nodes instead of it
        return sum(visible(n["call"]) if n["kind"] == "call" else 1 for n in doc["graphs"][key]["nodes"])
    assert int(r["rendered"]) == visible(":forward")
