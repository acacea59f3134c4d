"""A server process for tests/serve: load saved programs (a fresh process: nothing traced here), call
each with tokenizer-style requests, compare with eager transformers, and print one JSON object
``{"<model>/<variant>/<case>": "ok" | "<what went wrong>"}``.

Usage: ``python serve_child.py PLAN.json``; the plan is ``{"programs": {"<model>/<variant>": [model,
file, model directory]}, "cases": {"<model>": {"<case>": [batch, [lengths...], [keys left out]?,
[T5 decoder lengths]?]}}}``."""
from __future__ import annotations

import json
import os
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models  # noqa: E402
import transformers  # noqa: E402,F401  (a server that tokenizes has transformers imported)

import tracejit  # noqa: E402


def check(program, eager, request) -> str:
    """"ok", or what differs: the output class, its attribute / key / index access, a value."""
    try:
        with torch.no_grad():
            got = program(**request)
    except tracejit.GuardError as e:
        return f"GuardError: {str(e).splitlines()[0]}"
    except Exception as e:   # the report names it; the test fails on anything but "ok"
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    with torch.no_grad():
        expected = eager(**request)
    if type(got) is not type(expected):
        return f"class {type(got).__qualname__}, eager {type(expected).__qualname__}"
    if list(got.keys()) != list(expected.keys()):
        return f"keys {list(got.keys())}, eager {list(expected.keys())}"
    for i, key in enumerate(expected.keys()):
        e = expected[key]
        for how, value in (("attribute", getattr(got, key)), ("key", got[key]), ("index", got[i])):
            if value.shape != e.shape or not torch.allclose(value, e, rtol=1e-4, atol=1e-4):
                diff = (value - e).abs().max().item() if value.shape == e.shape else "shape"
                return f"{key} by {how}: {list(value.shape)} vs eager {list(e.shape)}, max diff {diff}"
    return "ok"


def main(plan_path: str) -> None:
    with open(plan_path) as f:
        plan = json.load(f)
    results = {}
    eager_models = {}
    for label, (name, path, directory) in plan["programs"].items():
        program = tracejit.load(path)
        eager = eager_models.setdefault(name, tiny_models.build(name))
        for case, (batch, lengths, *more) in plan["cases"][name].items():
            omit, decoder_lengths = (more + [(), None])[:2]
            request = tiny_models.request(name, directory, batch, lengths, seed=zlib.crc32(case.encode()) % 1000,
                                          omit=omit, decoder_lengths=decoder_lengths)
            results[f"{label}/{case}"] = check(program, eager, request)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
