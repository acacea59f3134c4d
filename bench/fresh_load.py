"""Server start: ``tracejit.load`` vs ``torch.jit.load`` in a FRESH process (``bench_serialize.py --fresh``).

Methodology
-----------
* Models: tiny BERT (2 layers, hidden 32, vocab 100) and BERT-base (``BertConfig()`` defaults, 12 layers;
  ``--quick``: 4), random weights, eval mode, wrapped as in bench_serialize.py (``forward(input_ids, mask)``
  returns the last hidden state), traced once with ``torch.jit.trace`` and once with ``tracejit.trace`` on
  (1, 16) and saved to a temp directory.
* Each measurement is a new ``python`` process (``-c``, ``torch.set_num_threads(--threads)``, default
  $OMP_NUM_THREADS else 2) that times, with ``time.perf_counter``: ``import torch``; ``import tracejit``
  (tracejit only); the load; the first call (under ``torch.no_grad()``); the second call; and, with
  ``time.process_time``, the CPU time of ``import tracejit`` + load and of the first call (steadier than
  wall time on a busy machine: a first call of 3 ms CPU shows 3 or 11-23 ms of wall time at load average
  15-20; the CPU columns print the median and the minimum). The processes of the peers alternate (so drift of the machine affects both alike); each row is
  the MEDIAN over ``--runs`` processes (default 7; ``--quick``: 3). ``--before DIR`` adds the tracejit of
  another source tree (an older checkout) as one more interleaved peer, on the same files.
* Bytecode: the children read cached bytecode (PYTHONPYCACHEPREFIX in the temp directory, written by one
  untimed run of each peer), as an installed package has it (pip compiles it at install time); a checkout
  run with PYTHONDONTWRITEBYTECODE=1 compiles every module it imports, ~3x tracejit's import time
  (``--no-bytecode-cache`` measures that).
* Code cache (serialize/code_cache.py): each tracejit peer has its own cache directory in the temp directory,
  written by the untimed first run, so ``tracejit`` is a server's start on a machine that loaded the file
  before (any start after the first; each entry is keyed by the file's header and this tracejit);
  ``tracejit, first load`` gets an empty cache in every process: the first load of the file on the machine,
  which compiles the program and writes the entry.
* ``load`` is the load alone; ``import tracejit + load`` is what tracejit adds where torch.jit.load
  stands (the target: no more than torch.jit.load); ``import tracejit + load + first call`` is what a
  server pays after ``import torch`` before its first answer (TorchScript's first call runs its
  profiling executor); ``start`` adds ``import torch``. Files are warm in the page cache (caches cannot be dropped here).
* ``tracejit, no CRC`` loads with ``check_integrity=False``: the CRC of the weights runs on a second
  thread while the file is read, so it is hidden where a core is free and shows on a busy machine.
  CPU of a BERT-base load (fresh process, process_time per step, minimum of 3, busy 2-core machine):
  reading the 438 MB into memory with the CRC on the second thread ~307 ms (the read alone ~280-300 ms: what
  torch.jit.load pays too; ISA-L's CRC ~22 ms), building the program (decode, validate, compile) ~37 ms.
  Tiny BERT (branch load9, quiet, 1 thread, cached bytecode; earlier passes: bench/RESULTS.md "Server start"):
  import tracejit ~13.5 ms (87 modules: ~50 us each is the import system's fixed cost, ~1 ms the collector's young
  collection of what the import made when its pause ends, the rest the module bodies, thinly spread); load ~18 ms:
  decode + validate 22 graphs (137 nodes) ~7.4 (validate ~3.9, decode ~2.1), generate ~3.4, compile() + exec ~3.0,
  header JSON ~1.7, expansion bound, tensors, module entries and tree ~0.5 each. Steady state the same load is
  ~15 ms: ~3 ms is a process's first time (torch's registry: op overloads, schema arguments; the young collection
  of what the load made ~0.45 ms). ~80-100 us per node over decode, validate, generate and compile: no hot spot.
  First call ~2.4-2.8 ms.
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
t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); c1 = time.process_time()
torch.set_num_threads(int(sys.argv[2]))
m = torch.jit.load(sys.argv[1]); t3 = time.perf_counter(); c3 = time.process_time()
ids = torch.randint(0, 100, (1, 16)); mask = torch.ones(1, 16, dtype=torch.long)
with torch.no_grad():
    t4 = time.perf_counter(); c4 = time.process_time(); m(ids, mask); t5 = time.perf_counter(); c5 = time.process_time()
    m(ids, mask); t6 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "import tracejit": 0.0, "load": t3 - t1, "first call": t5 - t4,
                  "second call": t6 - t5, "cpu": c3 - c1,
                  "cpu first call": c5 - c4}))
""",
    "tracejit": """
import time, json, sys
t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); c1 = time.process_time()
import tracejit; t2 = time.perf_counter()
torch.set_num_threads(int(sys.argv[2]))
m = tracejit.load(sys.argv[1]); t3 = time.perf_counter(); c3 = time.process_time()
ids = torch.randint(0, 100, (1, 16)); mask = torch.ones(1, 16, dtype=torch.long)
with torch.no_grad():
    t4 = time.perf_counter(); c4 = time.process_time(); m(ids, mask); t5 = time.perf_counter(); c5 = time.process_time()
    m(ids, mask); t6 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "import tracejit": t2 - t1, "load": t3 - t2, "first call": t5 - t4,
                  "second call": t6 - t5, "cpu": c3 - c1,
                  "cpu first call": c5 - c4}))
""",
}
# the same, without the CRC check of the weights (the integrity check's share of the load; docs/SECURITY.md)
CHILD["tracejit, no CRC"] = CHILD["tracejit"].replace("tracejit.load(sys.argv[1])",
                                                      "tracejit.load(sys.argv[1], check_integrity=False)")
# the first load of the file on this machine: an empty code cache (serialize/code_cache.py) for each process
CHILD["tracejit, first load"] = CHILD["tracejit"]
COLD = {"tracejit, first load"}
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
    paths["tracejit, no CRC"] = paths["tracejit, first load"] = paths["tracejit"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(model, example), paths["torch.jit"])
        tracejit.save(tracejit.trace(model, example), paths["tracejit"])
    return paths


def _child(peer: str, path: str, threads: int, root: str = _REPO_ROOT, pycache: str | None = None,
           cache: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    if cache is not None:   # the code cache the child uses (a fresh empty one for COLD peers)
        os.makedirs(cache, exist_ok=True)
        env["TRACEJIT_CACHE_DIR"] = tempfile.mkdtemp(dir=cache) if peer in COLD else os.path.join(cache, "warm")
    if pycache:   # bytecode cached, as an installed package has it (pip compiles .pyc at install time)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    done = subprocess.run([sys.executable, "-c", CHILD[peer], path, str(threads)], capture_output=True, text=True,
                          env=env, cwd=root, timeout=600)   # cwd: `python -c` imports from it first
    if done.returncode:
        raise RuntimeError(f"{peer} child failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _med_min(seconds: list) -> str:
    """Median and minimum in ms: on a busy machine load only adds time, so the minimum is the steadier figure."""
    return f"{statistics.median(seconds) * 1e3:.1f} ({min(seconds) * 1e3:.1f})"


def _ratios(cpu: list, jit_cpu: list) -> str:
    """The CPU time over torch.jit.load's, of the medians and of the minimums (load only adds time)."""
    return (f"{statistics.median(cpu) / statistics.median(jit_cpu):.2f}x "
            f"({min(cpu) / min(jit_cpu):.2f}x)")


def run(quick: bool, runs: int | None, before: str | None = None, threads: int | None = None,
        bytecode: bool = True) -> None:
    """``before``: another tracejit source tree (a checkout of an older commit), measured as one more peer,
    interleaved with the others, on the same files (the format is the same). ``bytecode``: the children
    read compiled bytecode (written by an untimed first run of each peer), as an installed package does;
    False: every import compiles its source (PYTHONDONTWRITEBYTECODE, as in a bare checkout)."""
    runs = runs or (3 if quick else 7)
    threads = threads or int(os.environ.get("OMP_NUM_THREADS", "2"))
    peers = [(peer, peer, _REPO_ROOT) for peer in CHILD]
    if before:
        peers.insert(1, ("tracejit (before)", "tracejit", os.path.abspath(before)))
    print(f"threads {threads}; bytecode {'cached' if bytecode else 'compiled at each import'}; "
          f"load average at start {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as d:
        pycache = os.path.join(d, "pycache") if bytecode else None
        for size in ("tiny", "base"):
            paths = _save_both(_bert(size, 4 if quick else None), d, size)
            rows = {label: [] for label, *_ in peers}
            caches = {label: os.path.join(d, f"code-cache-{i}") for i, (label, *_) in enumerate(peers)}
            for label, peer, root in peers:   # untimed: writes the bytecode caches and the warm code caches
                _child(peer, paths[peer], threads, root, pycache, caches[label])
            for _ in range(runs):
                for label, peer, root in peers:   # interleaved
                    rows[label].append(_child(peer, paths[peer], threads, root, pycache, caches[label]))
            label = "BERT-base" + (" (4 layers)" if quick else "") if size == "base" else "tiny BERT"
            print(f"\n{label}: fresh process, median of {runs} (ms); load average now {os.getloadavg()}\n")
            print("| peer | " + " | ".join(COLUMNS) + " | import tracejit + load | / torch.jit.load "
                  "| CPU of import tracejit + load (median, min) | CPU / torch.jit.load's (median, min) "
                  "| CPU of first call (median, min) | import tracejit + load + first call "
                  "| start (imports + load + first call) |")
            print("|---" * (len(COLUMNS) + 8) + "|")
            jit_load = statistics.median(s["load"] for s in rows["torch.jit"])
            jit_cpu = [s["cpu"] for s in rows["torch.jit"]]
            for peer, samples in rows.items():
                med = {c: statistics.median(s[c] for s in samples) * 1e3 for c in COLUMNS}
                own = statistics.median(s["import tracejit"] + s["load"] for s in samples)
                answer = statistics.median(s["import tracejit"] + s["load"] + s["first call"] for s in samples)
                start = statistics.median((s["import torch"] + s["import tracejit"] + s["load"] + s["first call"])
                                          for s in samples) * 1e3
                print(f"| {peer} | " + " | ".join(f"{med[c]:.1f}" for c in COLUMNS)
                      + f" | {own * 1e3:.1f} | {own / jit_load:.2f}x | {_med_min([s['cpu'] for s in samples])}"
                      + f" | {_ratios([s['cpu'] for s in samples], jit_cpu)}"
                      + f" | {_med_min([s['cpu first call'] for s in samples])}"
                      + f" | {answer * 1e3:.1f} | {start:.1f} |")
