"""Server start: ``tracejit.load`` vs ``torch.jit.load`` in a FRESH process (``bench_serialize.py --fresh``).

Methodology
-----------
* Models: tiny BERT (2 layers, hidden 32, vocab 100) and BERT-base (``BertConfig()`` defaults, 12 layers;
  ``--quick``: 4), random weights, eval mode, wrapped as in bench_serialize.py (``forward(input_ids, mask)``
  returns the last hidden state), traced once with ``torch.jit.trace`` and once with ``tracejit.trace`` on
  (1, 16) and saved to a temp directory.
* Each measurement is a new ``python`` process (``-c``, ``torch.set_num_threads(2)``) that times, with
  ``time.perf_counter``: ``import torch``; ``import tracejit`` (tracejit only); the load; the first call
  (under ``torch.no_grad()``); the second call. The processes of the peers alternate (so drift of the
  machine affects both alike); each row is the MEDIAN over ``--runs`` processes (default 7; ``--quick``: 3).
* ``load`` is the load alone; ``start`` is everything a server pays before its first answer:
  imports + load + first call. Files are warm in the page cache (caches cannot be dropped here).
* ``tracejit, no CRC`` loads with ``check_integrity=False``: the CRC of the weights runs on a second
  thread while the file is read, so it is hidden where a core is free and shows on a busy machine.
  Profile of a BERT-base load (cProfile, fresh process, busy 2-core machine): reading the 438 MB
  into memory ~0.8-1.2 s (what torch.jit.load pays too), building the program (decode, validate,
  compile 33 graphs) 0.10-0.14 s.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

import torch

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = {
    "torch.jit": """
import time, json, sys
t0 = time.perf_counter(); import torch; t1 = time.perf_counter()
torch.set_num_threads(2)
m = torch.jit.load(sys.argv[1]); t3 = time.perf_counter()
ids = torch.randint(0, 100, (1, 16)); mask = torch.ones(1, 16, dtype=torch.long)
with torch.no_grad():
    t4 = time.perf_counter(); m(ids, mask); t5 = time.perf_counter(); m(ids, mask); t6 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "import tracejit": 0.0, "load": t3 - t1, "first call": t5 - t4,
                  "second call": t6 - t5}))
""",
    "tracejit": """
import time, json, sys
t0 = time.perf_counter(); import torch; t1 = time.perf_counter()
import tracejit; t2 = time.perf_counter()
torch.set_num_threads(2)
m = tracejit.load(sys.argv[1]); t3 = time.perf_counter()
ids = torch.randint(0, 100, (1, 16)); mask = torch.ones(1, 16, dtype=torch.long)
with torch.no_grad():
    t4 = time.perf_counter(); m(ids, mask); t5 = time.perf_counter(); m(ids, mask); t6 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "import tracejit": t2 - t1, "load": t3 - t2, "first call": t5 - t4,
                  "second call": t6 - t5}))
""",
}
# the same, without the CRC check of the weights (the integrity check's share of the load; docs/SECURITY.md)
CHILD["tracejit, no CRC"] = CHILD["tracejit"].replace("tracejit.load(sys.argv[1])",
                                                      "tracejit.load(sys.argv[1], check_integrity=False)")
COLUMNS = ("import torch", "import tracejit", "load", "first call", "second call")


class _Wrapper(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, mask):
        return self.bert(input_ids, attention_mask=mask, return_dict=False)[0]


def _bert(size: str, layers: int | None):
    import transformers
    torch.manual_seed(0)
    if size == "tiny":
        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64)
    else:
        cfg = transformers.BertConfig(**({"num_hidden_layers": layers} if layers else {}))
    return _Wrapper(transformers.BertModel(cfg)).eval()


def _save_both(model, directory: str, name: str) -> dict:
    import tracejit
    example = (torch.randint(0, 100, (1, 16)), torch.ones(1, 16, dtype=torch.long))
    paths = {"torch.jit": os.path.join(directory, f"{name}.pt"), "tracejit": os.path.join(directory, f"{name}.tjit")}
    paths["tracejit, no CRC"] = paths["tracejit"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model, example), paths["torch.jit"])
        tracejit.save(tracejit.trace(model, example), paths["tracejit"])
    return paths


def _child(peer: str, path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_REPO_ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHILD[peer], path], capture_output=True, text=True, env=env,
                          timeout=600)
    if done.returncode:
        raise RuntimeError(f"{peer} child failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(quick: bool, runs: int | None) -> None:
    runs = runs or (3 if quick else 7)
    with tempfile.TemporaryDirectory() as d:
        for size in ("tiny", "base"):
            paths = _save_both(_bert(size, 4 if quick else None), d, size)
            rows = {peer: [] for peer in CHILD}
            for _ in range(runs):
                for peer in CHILD:   # interleaved
                    rows[peer].append(_child(peer, paths[peer]))
            label = "BERT-base" + (" (4 layers)" if quick else "") if size == "base" else "tiny BERT"
            print(f"\n{label}: fresh process, median of {runs} (ms)\n")
            print("| peer | " + " | ".join(COLUMNS) + " | start (imports + load + first call) |")
            print("|---" * (len(COLUMNS) + 2) + "|")
            for peer, samples in rows.items():
                med = {c: statistics.median(s[c] for s in samples) * 1e3 for c in COLUMNS}
                start = statistics.median((s["import torch"] + s["import tracejit"] + s["load"] + s["first call"])
                                          for s in samples) * 1e3
                print(f"| {peer} | " + " | ".join(f"{med[c]:.1f}" for c in COLUMNS) + f" | {start:.1f} |")
