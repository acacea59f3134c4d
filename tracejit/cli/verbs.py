"""The CLI's verbs and the module that runs each: the one place the command line imports a module by name.

``tracejit --help`` lists every verb but imports none of their modules; a command line imports the module of
the verb it names, and only that one (``verb_module``). Each verb's module imports what it runs at module
level (the tracer, the ONNX exporter, the viewer, migrate), so ``tracejit inspect`` does not import the
tracer or onnxscript, and ``tracejit view`` works without the onnx extra (``--netron`` needs it)."""
from __future__ import annotations

import importlib

# verb -> (its module: ``register(sub)`` adds the verb's parser and runner, the verb's one-line help)
VERBS = {
    "inspect": ("tracejit.cli.inspect", "describe a saved program without running it"),
    "trace": ("tracejit.cli.trace", "trace a module built by a factory and save it"),
    "run": ("tracejit.cli.run", "load a saved program and time it on random inputs"),
    "export": ("tracejit.cli.export", "write a saved program as ONNX, or as a Triton model repository"),
    "migrate": ("tracejit.cli.migrate", "convert a torch.jit.trace archive (.pt) into a tracejit file"),
    "view": ("tracejit.cli.view", "write an interactive HTML view of a saved program's graph"),
}


def verb_module(name: str):
    """The module of verb ``name`` (a key of VERBS), imported now. A missing optional dependency (the onnx extra
    for export) is an ImportError naming it (export/_deps.py)."""
    return importlib.import_module(VERBS[name][0])   # the CLI's one import by name


def named_verb(argv: list) -> str | None:
    """The verb a command line names: its first argument that is not an option (the top-level options,
    --debug, --version and --help, take no value), or None."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in VERBS else None
