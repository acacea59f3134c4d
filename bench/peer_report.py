"""Tables of bench_peers.py (markdown) and their place in bench/RESULTS.md."""
from __future__ import annotations

import os
from typing import Any

BEGIN, END = "<!-- bench_peers: begin -->", "<!-- bench_peers: end -->"
ENGINE_BEGIN = "<!-- bench_engine: begin -->"


def _cell(v: Any, eager: Any) -> str:
    if isinstance(v, float):
        if isinstance(eager, float) and eager > 0:
            return f"{v:.1f} ({v / eager:.2f}x)"
        return f"{v:.1f}"
    return str(v)


def _ratio(a: Any, b: Any) -> str:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return f"{a / b:.2f}x"
    return "-"


def _fastest(row: dict[str, Any], names) -> tuple[float, str] | None:
    timed = [(row[p], p) for p in names if isinstance(row.get(p), float)]
    return min(timed) if timed else None


def per_call_table(rows: list[dict[str, Any]], peers, tracejit_engines, extra=()) -> list[str]:
    """One row per workload: every column's time and ratio, the fastest peer, tracejit's best engine
    (``extra`` columns, e.g. lower precision, are shown but not counted as either)."""
    cols = [p for p in list(peers) + list(tracejit_engines) + list(extra) if p != "eager"]
    lines = [
        "| workload | eager (us) | " + " | ".join(f"{c} us (ratio)" for c in cols)
        + " | fastest peer | tracejit's best | beats fastest peer? |",
        "|---" * (len(cols) + 5) + "|",
    ]
    for r in rows:
        e = r["eager"]
        best_peer = _fastest(r, peers)
        best_tj = _fastest(r, tracejit_engines)
        peer_s = f"{best_peer[1]} {_ratio(best_peer[0], e)}" if best_peer else "-"
        tj_s = f"**{best_tj[1]} {_ratio(best_tj[0], e)}**" if best_tj else "-"
        beats = "-" if not (best_peer and best_tj) else (
            "yes" if best_tj[0] <= best_peer[0] else f"no ({best_tj[0] / best_peer[0]:.2f}x the fastest peer)")
        lines.append(f"| {r['workload']} | {_cell(e, None)} | " + " | ".join(_cell(r.get(c, 'n/a'), e) for c in cols)
                     + f" | {peer_s} | {tj_s} | {beats} |")
    return lines


def accuracy_table(rows: list[dict[str, Any]], names) -> list[str]:
    """Largest absolute error and relative (L2) error against eager, for the columns that reorder
    arithmetic or lower its precision."""
    lines = ["| workload | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for r in rows:
        errs = r.get("errors", {})
        lines.append(f"| {r['workload']} | " + " | ".join(
            f"{errs[n][0]:.1e} / {errs[n][1]:.1e}" if n in errs else "-" for n in names) + " |")
    return lines


def build_time_table(rows: list[dict[str, Any]], builders, notes) -> list[str]:
    cols = list(builders)
    lines = [
        "| workload | calls/round | " + " | ".join(f"{c} (s)" for c in cols)
        + " | " + " | ".join(f"{n} (s)" for n in notes) + " | notes |",
        "|---" * (len(cols) + len(notes) + 3) + "|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['calls_per_round']} | "
            + " | ".join(f"{r['build_s'][c]:.2f}" if c in r["build_s"] else "-" for c in cols)
            + " | " + " | ".join(f"{r['build_notes'][n]:.2f}" if n in r["build_notes"] else "-" for n in notes)
            + f" | {'; '.join(r['notes'])} |"
        )
    return lines


def tracing_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | torch.jit.trace (s) | tracejit (s) | tracejit/jit |",
        "|---|---|---|---|",
    ]
    for r in results:
        j, t = r["torch.jit.trace"], r["tracejit"]
        fj = f"{j:.2f}" if isinstance(j, float) else j
        ft = f"{t:.2f}" if isinstance(t, float) else t
        lines.append(f"| {r['model']} | {fj} | {ft} | {_ratio(t, j)} |")
    return lines


def write_results(path: str, section: str, begin: str = BEGIN, end: str = END) -> None:
    """Put ``section`` between the ``begin`` / ``end`` markers of ``path``. Without them: the peers'
    section (an older bench_peers.py wrote no markers) replaces what comes before bench_engine's
    section; any other section is appended. The rest of the file (other scripts' sections, notes
    written by hand) is kept."""
    text = open(path).read() if os.path.exists(path) else ""
    block = f"{begin}\n{section.rstrip()}\n{end}\n"
    if begin in text and end in text:
        rest = text[text.index(end) + len(end):].lstrip("\n")
        text = text[:text.index(begin)] + block + ("\n" + rest if rest else "")
    elif begin == BEGIN and ENGINE_BEGIN in text:
        text = block + "\n" + text[text.index(ENGINE_BEGIN):]
    elif begin == BEGIN:
        text = block + ("\n" + text if text else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block if text else block
    with open(path, "w") as f:
        f.write(text)
