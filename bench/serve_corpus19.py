"""Models outside the zoo, as a new user meets them (issue #25): trace, call on NEW shapes, save / load,
optimize, export, each against eager.

Per model (bench/serve_corpus19_models.py: timm, torchvision and transformers models the zoo does not
hold, tiny configs, random weights), traced on its batch-1 example, then on each NEW input set (batch 2;
batch 2 at another image size / sequence length where the model takes one):

- ``new``: the traced program (a failed guard retraces: ``specs`` counts the specializations);
- ``load0``: saved right after the trace, loaded, called (eager's answer or a GuardError naming the line);
- ``load1``: saved after the new calls (it holds their specializations), loaded, called;
- ``ofi``: ``optimize_for_inference(traced)``; ``ort``: ``backend="onnxruntime"``;
- ``onnx``: ``export_onnx`` run in an onnxruntime session directly;
- ``jit``: torch.jit.trace + freeze + optimize_for_inference (the reference error).

With ``SERVE_CORPUS_F64=1`` each row also holds ``f64``: every column's (and eager's) distance to the model
run in float64, the arbiter where a column's error exceeds jit's (who is further from the math?).

Each value is the largest absolute error against eager over every output tensor and input set, or the
error's first words. ``worse`` lists the tracejit columns above ``1.25 * jit + 8 ulps`` of the output.

Usage::

    python bench/serve_corpus19.py [--models a,b] [--rows FILE] [--timeout S]   # one subprocess per model
    python bench/serve_corpus19.py --from-rows FILE                             # the table only
    python bench/serve_corpus19.py --one NAME                                   # in this process, one JSON line
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import traceback
import warnings

import torch

_BENCH = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_BENCH)
_VISION = os.path.join(sys.prefix, "vision-tests")
COLUMNS = ("new", "load0", "load1", "ofi", "ort", "onnx", "jit")


def _leaves(out):
    from torch.utils import _pytree
    if isinstance(out, dict) and not type(out).__module__.startswith("transformers"):
        out = list(out.values())
    return [t for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _error(got, want) -> float:
    got, want = _leaves(got), _leaves(want)
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, eager {len(want)}")
    err = 0.0
    for g, w in zip(got, want):
        g = torch.as_tensor(g)
        if tuple(g.shape) != tuple(w.shape):
            raise AssertionError(f"shape {tuple(g.shape)}, eager {tuple(w.shape)}")
        if not w.numel():
            continue
        if w.is_floating_point() or w.is_complex():
            d = (g.double() - w.double()).abs()
            d = torch.where(torch.isnan(g.double()) & torch.isnan(w.double()), 0.0, d)
            err = max(err, d.max().item())
        elif not torch.equal(g.to(w.dtype), w):
            err = float("inf")
    return err


def _scale(out) -> float:
    return max((t.abs().max().item() for t in _leaves(out) if t.is_floating_point() and t.numel()), default=0.0)


def _call(fn, inputs):
    return fn(**inputs) if isinstance(inputs, dict) else fn(*inputs)


def _short(exc: BaseException, n=150) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:n]


def _onnx_runner(traced, inputs_example):
    import onnxruntime as ort
    import tracejit
    proto = tracejit.export_onnx(traced)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def run(*args, **kwargs):
        if kwargs:
            feed = {k: v for k, v in kwargs.items() if k in names}
        else:
            flat = _leaves(args)
            if len(flat) != len(names):
                raise AssertionError(f"{len(flat)} inputs, model {names}")
            feed = dict(zip(names, flat))
        outs = sess.run(None, {k: v.numpy() for k, v in feed.items()})
        return [torch.from_numpy(o) for o in outs]
    return run


def _float64_answers(model, news):
    """The model in float64 on each input set (float inputs widened), and eager float32's distance to it."""
    import copy
    wide = copy.deepcopy(model).double()
    widen = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
    with torch.no_grad():
        return [_call(wide, {k: widen(v) for k, v in inp.items()} if isinstance(inp, dict) else
                      tuple(widen(v) for v in inp)) for _, inp in news]


def _jit(model, example):
    if isinstance(example, dict):
        traced = torch.jit.trace(model, example_kwarg_inputs=example, strict=False)
    else:
        traced = torch.jit.trace(model, example, strict=False)
    return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))


def run_one(name: str) -> dict:
    import tracejit
    from serve_corpus19_models import MODELS
    row = {"model": name, "family": MODELS[name][0], "err": {}, "notes": []}
    t0 = time.time()
    torch.manual_seed(0)
    model, example, news = MODELS[name][1]()
    with torch.no_grad():
        wants = [_call(model, inp) for _, inp in news]
    row["scale"] = max(_scale(w) for w in wants)
    row["shapes"] = [label for label, _ in news]
    kw = isinstance(example, dict)

    ref64 = _float64_answers(model, news) if os.environ.get("SERVE_CORPUS_F64") else None

    def attempt(col, make):
        """make() -> a callable; its error over every new input set, or the exception's first words."""
        try:
            with torch.no_grad():
                fn = make()
                errs = []
                for (label, inp), want in zip(news, wants):
                    try:
                        errs.append(_error(_call(fn, inp), want))
                    except Exception as exc:  # noqa: BLE001
                        row["notes"].append(f"{col} {label}: {_short(exc, 400)}")
                        raise
                row["err"][col] = max(errs)
                row.setdefault("per_shape", {})[col] = errs
                if ref64 is not None:   # the distance to the float64 model's answer: who is closer to the math
                    row.setdefault("f64", {})[col] = max(_error(_call(fn, inp), w) for (_, inp), w in zip(news, ref64))
            return fn
        except Exception as exc:  # noqa: BLE001
            row["err"].setdefault(col, _short(exc))
            if col != "jit" and not any(n.startswith(col + " ") for n in row["notes"]):
                row["notes"].append(f"{col}: {_short(exc, 400)}")
            if os.environ.get("SERVE_CORPUS_TRACEBACK"):
                traceback.print_exc()
            return None

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            traced = (tracejit.trace(model, example_kwarg_inputs=example, strict=False) if kw
                      else tracejit.trace(model, example, strict=False))
        except Exception as exc:  # noqa: BLE001
            row["trace"] = _short(exc, 400)
            if os.environ.get("SERVE_CORPUS_TRACEBACK"):
                traceback.print_exc()
            row["seconds"] = round(time.time() - t0, 1)
            return row
        row["trace"] = "ok"
        first = io.BytesIO()
        try:
            tracejit.save(traced, first)
        except Exception as exc:  # noqa: BLE001
            row["err"]["load0"] = "save: " + _short(exc)
            row["notes"].append(f"save: {_short(exc, 400)}")
            first = None

        def loaded(buf):
            def make():
                buf.seek(0)
                return tracejit.load(buf)
            return make

        attempt("ofi", lambda: tracejit.optimize_for_inference(traced))
        attempt("ort", lambda: tracejit.optimize_for_inference(traced, backend="onnxruntime"))
        attempt("onnx", lambda: _onnx_runner(traced, example))
        attempt("new", lambda: traced)
        row["specs"] = len(traced.specializations)
        if first is not None:
            attempt("load0", loaded(first))
        second = io.BytesIO()
        try:
            tracejit.save(traced, second)
            attempt("load1", loaded(second))
        except Exception as exc:  # noqa: BLE001
            row["err"]["load1"] = "save: " + _short(exc)
            if first is not None:
                row["notes"].append(f"save after the new calls: {_short(exc, 400)}")
        attempt("jit", lambda: _jit(model, example))
    if ref64 is not None:
        with torch.no_grad():
            row.setdefault("f64", {})["eager"] = max(_error(_call(model, inp), w) for (_, inp), w in zip(news, ref64))
    row["worse"] = worse_than_jit(row)
    row["seconds"] = round(time.time() - t0, 1)
    return row


def worse_than_jit(row: dict) -> list[str]:
    jit = row["err"].get("jit")
    bound = (1.25 * jit if isinstance(jit, float) else 0.0) + 8 * torch.finfo(torch.float32).eps * max(row["scale"], 1)
    return [c for c in ("new", "load1", "ofi", "ort", "onnx")
            if isinstance(row["err"].get(c), float) and row["err"][c] > bound]


def _env_for(family: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [_ROOT, _BENCH, os.path.join(_ROOT, "tests", "models")] + ([_VISION] if family in ("timm", "tv") else [])))
    return env


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "0" if v == 0 else f"{v:.1e}"
    return "FAIL"


def render(rows: list[dict]) -> str:
    head = "| model | trace | " + " | ".join(COLUMNS) + " | specs | worse than jit |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 4)]
    for r in rows:
        trace = "ok" if r.get("trace") == "ok" else "FAIL"
        cells = [_fmt(r["err"].get(c)) for c in COLUMNS]
        lines.append(f"| {r['model']} | {trace} | " + " | ".join(cells) + f" | {r.get('specs', '-')} | "
                     f"{', '.join(r.get('worse', [])) or '-'} |")
    fails = [(r["model"], n) for r in rows for n in
             ([f"trace: {r['trace']}"] if r.get("trace") not in ("ok", None) else []) + r.get("notes", [])]
    if fails:
        lines += ["", "Failures:"] + [f"- {m}: {n}" for m, n in fails]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models")
    ap.add_argument("--one")
    ap.add_argument("--rows")
    ap.add_argument("--from-rows")
    ap.add_argument("--timeout", type=float, default=900)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(run_one(a.one)), flush=True)
        return 0
    if a.from_rows:
        rows = {}
        for path in a.from_rows.split(","):
            for line in open(path):
                r = json.loads(line)
                rows[r["model"]] = r
        print(render(list(rows.values())))
        return 0
    from serve_corpus19_models import MODELS
    names = a.models.split(",") if a.models else list(MODELS)
    rows = []
    for name in names:
        family = MODELS[name][0]
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", name], env=_env_for(family), cwd=_ROOT,
                                  capture_output=True, text=True, timeout=a.timeout)
            last = proc.stdout.strip().splitlines()[-1:] or [""]
            row = json.loads(last[0]) if last[0].startswith("{") else {
                "model": name, "family": family, "err": {}, "trace": "crashed: " + proc.stderr.strip()[-300:]}
        except subprocess.TimeoutExpired:
            row = {"model": name, "family": family, "err": {}, "trace": f"timeout {a.timeout:.0f}s"}
        rows.append(row)
        print(f"{name}: {row.get('trace')} {row['err']} worse={row.get('worse')} {row.get('seconds')}s",
              file=sys.stderr, flush=True)
        if a.rows:
            with open(a.rows, "a") as fh:
                fh.write(json.dumps(row) + "\n")
    print(render(rows))
    return 0


if __name__ == "__main__":
    for _p in (_ROOT, _BENCH, os.path.join(_ROOT, "tests", "models")):
        if _p not in sys.path:
            sys.path.insert(0, _p)
    sys.exit(main())
