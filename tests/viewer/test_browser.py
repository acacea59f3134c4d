"""The viewer in a real browser (headless Chromium): a BERT-base-sized graph (12 layers, the
BERT-base module structure at tiny widths, so the node count is BERT-base's) opens, every node
of the fully expanded hierarchy is drawn, a search finds and reveals its hits, and a screenshot
is taken. Skipped, with the reason, where Chromium is not installed."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import warnings

import pytest
import torch

import tracejit
from tracejit.viewer import program_document

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = [
    pytest.mark.skipif(BROWSER is None, reason="no Chromium: install the Debian package 'chromium' to run the "
                                               "viewer's browser test"),
    pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers (test extras)"),
]


def chromium(tmp_path, url: str, *extra: str) -> str:
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1600,1000",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", *extra, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def visible_count(doc, key) -> int:
    """Nodes drawn when every submodule call under graph ``key`` is expanded."""
    return sum(visible_count(doc, n["call"]) if n["kind"] == "call" else 1 for n in doc["graphs"][key]["nodes"])


@pytest.fixture(scope="module")
def bert_base_page(tmp_path_factory):
    import transformers
    cfg = transformers.BertConfig(num_hidden_layers=12, num_attention_heads=12, hidden_size=48,
                                  intermediate_size=96, vocab_size=100)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 8))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (ids, torch.ones_like(ids)), strict=False)
    path = tmp_path_factory.mktemp("viewer") / "bert.html"
    traced.to_html(path)
    return path, program_document(traced)


@pytest.mark.slow
def test_bert_base_renders_every_node_and_search_reveals_hits(bert_base_page, tmp_path):
    path, doc = bert_base_page
    assert doc["node_count"] > 1000
    dom = chromium(tmp_path, f"{path.as_uri()}#expand=99&search=layer_norm", "--dump-dom")
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    rendered = int(re.search(r'data-rendered="(\d+)"', dom).group(1))
    assert rendered == visible_count(doc, ":forward") > 1000
    assert len(re.findall(r'<g class="node ', dom)) == rendered
    # 12 layers x 2 LayerNorms + the embeddings' LayerNorm
    assert re.search(r'id="hit-count">25 matches<', dom)
    assert len(re.findall(r'<li class="hit"', dom)) == 25
    assert re.search(r'class="node op  selected" data-id="[^"]+" data-op="aten::layer_norm', dom)
    # symbolic sizes by name (batch s0, length s1; 12 heads of 4): drawn in the nodes, and the note says what they are
    assert "Float[s0, s1, 48]" in dom and "Float[s0, 12, s1, 4]" in dom
    assert "Long[s0, s1]" in dom and "sizes the graph reads at run time" in dom


@pytest.mark.slow
def test_bert_base_collapsed_view_and_screenshot(bert_base_page, tmp_path):
    path, doc = bert_base_page
    dom = chromium(tmp_path, f"{path.as_uri()}#search=encoder.layer.11.output", "--dump-dom")
    # collapsed: the root graph, then only the call chain down to the first hit is expanded
    rendered = int(re.search(r'data-rendered="(\d+)"', dom).group(1))
    assert len(doc["graphs"][":forward"]["nodes"]) < rendered < 400
    assert "encoder.layer.11.output" in dom
    shot = tmp_path / "bert.png"
    chromium(tmp_path, f"{path.as_uri()}#expand=3&search=layer_norm", f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    print(f"viewer screenshot: {shot}")
