"""Where does oneDNN's linear (kernels/onednn_linear.py, ``OneDnnLinear``) beat torch's ``linear``? The bound
``MIN_MACS`` (and ``MIN_MACS_ONE_THREAD``) is read off this table: for each product shape from 0.5M to 40M
multiply-adds, both are called in 11 interleaved rounds; prints the median time ratio oneDNN / torch.

    python bench/bench_linear_threshold.py [threads]
"""
import torch, time, statistics, sys, itertools
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.dirname(__import__("os").path.abspath(__file__))))
from tracejit.kernels.onednn_linear import OneDnnLinear
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
rows = []
for m, k, n in itertools.product([16, 64, 136, 512], [64, 256, 768], [64, 192, 768, 3072]):
    macs = m * k * n
    if not (5e5 <= macs <= 4e7): continue
    w = torch.randn(n, k); b = torch.randn(n); x = torch.randn(m, k)
    kern = OneDnnLinear(w, b, "none", ())
    fs = {"torch": lambda: torch.nn.functional.linear(x, w, b), "onednn": lambda: kern(x)}
    t0 = time.perf_counter(); fs["torch"](); one = time.perf_counter() - t0
    reps = max(5, int(0.005 / max(one, 1e-6)))
    ts = {kk: [] for kk in fs}
    for r in range(11):
        for kk, f in fs.items():
            t = time.perf_counter()
            for _ in range(reps): f()
            ts[kk].append((time.perf_counter() - t) / reps)
    med = {kk: statistics.median(v) for kk, v in ts.items()}
    rows.append((macs, m, k, n, med["onednn"] / med["torch"], med["torch"] * 1e6))
for r in sorted(rows): print(f"MACs {r[0]/1e6:6.2f}M m {r[1]:4d} k {r[2]:4d} n {r[3]:4d} onednn/torch {r[4]:.2f} torch {r[5]:.1f}us")
