"""Bring a TorchScript archive made by ``torch.jit.trace`` over to tracejit.

    >>> traced = tracejit.migrate("old.pt", example_inputs)        # doctest: +SKIP
    >>> tracejit.save(traced, "new.tjit")                            # doctest: +SKIP

**Only migrate files you trust.** The archive is opened with ``torch.jit.load``, which runs the
TorchScript code (and may unpickle objects) inside it: migrating a file is as dangerous as
running it. This package is the one place in tracejit that calls ``torch.jit``; the program it
returns, and the tracejit file saved from it, need no TorchScript at all.

Each method graph of the archive (``forward`` of the root and of every submodule it calls) is
converted op by op into tracejit's IR: ATen ops by name and overload, constants, parameters and
buffers, tuples and lists, submodule calls (the module hierarchy is kept). TorchScript archives
keep no tensor shapes, so the conversion runs on example inputs (the inputs, or inputs shaped
like those, the model was traced with) and, like ``tracejit.trace``'s check, compares the
migrated program with the archive on them. The migrated methods carry the call-time budgets of a
program loaded from a .tjit file (docs/SECURITY.md): a size that follows the inputs is checked
before the op allocates. Control flow from scripted code (``prim::If``,
``prim::Loop``) and ops with no ATen name raise ``MigrationError`` naming the node and its
source line.
"""
from __future__ import annotations

import os
import warnings

import torch

from ..pytree import flatten
from ..serialize import limits
from .aten_call import same_kind
from .build import build_traced_module
from .convert import Converter
from ..serialize import torch_files as detect  # noqa: F401  (tracejit.migrate.detect: its old place)
from ..serialize.torch_files import is_torch_file, raise_if_torch_file
from .errors import MigrationError

__all__ = ["migrate", "archive_methods", "MigrationError", "raise_if_torch_file", "is_torch_file"]


def migrate(f, example_inputs=None, *, methods=None, check: bool = True, check_tolerance: float = 1e-5,
            map_location="cpu"):
    """Convert the TorchScript archive ``f`` (a path or binary file object) into a ``TracedModule``.

    ``example_inputs``: a tensor or a tuple of ``forward``'s arguments (as for ``torch.jit.trace``),
    needed because TorchScript does not record tensor shapes. ``methods``: for an archive made by
    ``torch.jit.trace_module``, ``{method name: example inputs}`` (as its ``inputs`` argument).
    With ``check`` (the default) the migrated module and the archive are run on the example
    inputs and must agree within ``check_tolerance`` (rtol and atol); random ops are exempt.
    Raises ``MigrationError`` when the archive holds something tracejit cannot express or the
    check fails. Runs TorchScript: trusted files only.
    """
    wanted = dict(methods or {})
    if example_inputs is not None:
        wanted.setdefault("forward", example_inputs)
    if not wanted:
        raise MigrationError("a TorchScript archive does not record the shapes it was traced with; pass "
                             "example inputs: tracejit.migrate(path, example_inputs) (a tensor or a tuple of "
                             "forward's arguments, shaped like the ones the model was traced with)")
    budget = limits.max_elements(_archive_size(f))
    script = _load_archive(f, map_location)
    conv = Converter()
    calls = {}
    for name, inputs in wanted.items():
        if not isinstance(name, str) or not script._c._has_method(name):
            raise MigrationError(f"the archive's module has no method {name!r}")
        args = inputs if isinstance(inputs, tuple) else (inputs,)
        with torch.no_grad():
            graph, _ = conv.method(script, name, "", [(None, a) for a in args], root_training=bool(script.training))
        conv.graphs.setdefault(id(script), {})[name] = graph
        calls[name] = args
    traced = build_traced_module(script, conv.graphs, conv.ledger, budget)
    if check:
        for name, args in calls.items():
            _check(getattr(script, name), getattr(traced, name), args, check_tolerance, random=bool(conv.ledger))
    return traced


def archive_methods(f, map_location="cpu") -> list[str]:
    """The methods of the archive's root module (``forward`` and those torch.jit.trace_module traced).
    Loads the archive: runs TorchScript, trusted files only."""
    return [name for name in _load_archive(f, map_location)._c._method_names() if not name.startswith("_")]


def _archive_size(f) -> int:
    """The archive's bytes (its call-time allocation budget grows with them); 0 when unknown."""
    try:
        if isinstance(f, (str, os.PathLike)):
            return os.path.getsize(f) if os.path.isfile(f) else 0
        here = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(here)
        return max(end - here, 0)
    except (OSError, AttributeError, ValueError):
        return 0


def _load_archive(f, map_location):
    where = os.fspath(f) if isinstance(f, (str, os.PathLike)) else "the file object"
    if isinstance(f, (str, os.PathLike)) and not os.path.isfile(f):
        raise MigrationError(f"{where}: no such file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # torch.jit.load's own; migrating is the way out
            warnings.simplefilter("ignore", FutureWarning)        # the same deprecation, as torch 2.15 words it
            module = torch.jit.load(f, map_location=map_location)
    except FileNotFoundError:
        raise MigrationError(f"{where}: no such file") from None
    except (RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MigrationError(f"{where} is not a TorchScript archive torch.jit.load can read ({first})") from None
    return module


def _check(script, traced, args, tol: float, random: bool) -> None:
    with torch.no_grad():
        want = flatten(script(*args))[0]
        got = flatten(traced(*args))[0]
    if len(want) != len(got):
        raise MigrationError(f"the migrated program returns {len(got)} values, the archive {len(want)}")
    for i, (w, g) in enumerate(zip(want, got)):
        if isinstance(w, torch.Tensor):
            ok = same_kind(g, w) if random else (isinstance(g, torch.Tensor) and same_kind(g, w)
                                                  and torch.allclose(g, w, rtol=tol, atol=tol, equal_nan=True))
        else:
            ok = g == w
        if not ok:
            raise MigrationError(f"output {i} of the migrated program differs from the archive's on the example "
                                 "inputs; please report this with the archive")
