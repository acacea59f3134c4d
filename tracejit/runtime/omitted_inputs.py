"""A call that leaves out a traced input whose forward has a default runs a trace made without it.

A BERT traced with ``input_ids, token_type_ids, attention_mask`` has generated code that takes
exactly those three; a client whose tokenizer returns no ``token_type_ids`` calls it with two. The
original forward would use its default (None: here, all-zero type ids; for a missing
``attention_mask``, no padding), and no value the trace could fill in stands for "not given" in
general, so such a call runs a specialization traced *without* that input:

- one the object already holds (a loaded file's, made ahead of time by ``trace --hf`` for the
  inputs a tokenizer may leave out, or by ``trace(..., specialize_for=[{...fewer keys...}])``);
- else, on a live object whose original forward has a default for every input left out (its
  signature binds the call), a new trace of the original on the call's inputs, published as a
  failed guard's retrace is (runtime/specialize.py);
- else the call's ArgumentTypeError stands (a loaded program that holds no such trace, an input the
  forward requires, a name it does not take).

Which specializations a call may run is decided by the names it passes (``accepts``); among those,
their guards decide, as for any call.
"""
from __future__ import annotations

import inspect

from .calling import spread_positional


def accepts(fn, args, kwargs) -> bool:
    """Do ``args`` / ``kwargs`` bind to the compiled root method ``fn``'s parameters (by name and
    number only: what each value must be is the generated code's check)?"""
    try:
        a, k = spread_positional(fn.graph, "", args, kwargs)
        _signature(fn).bind(None, *a, **k)   # None: the generated function's ``self``
    except TypeError:
        return False
    return True


def _signature(fn) -> inspect.Signature:
    sig = getattr(fn, "call_signature", None)
    if sig is None:   # computed once per compiled function (the same answer from any thread)
        sig = fn.call_signature = inspect.signature(fn)
    return sig


def original_accepts(signature: inspect.Signature | None, args, kwargs) -> bool:
    """Does the original callable take these arguments (its defaults fill what the call leaves out)?
    Unknown (no signature recorded): no."""
    if signature is None:
        return False
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def left_out(fn, args, kwargs) -> list[str]:
    """The parameters of ``fn`` (a compiled root method) this call does not pass."""
    names = list(fn.graph.param_names)
    passed = set(names[:len(args)]) | set(kwargs)
    return [n for n in names if n not in passed]


def reason(first_fn, args, kwargs, owner_name: str) -> str:
    """Why a specialization for such a call exists: the inputs it was traced without."""
    missing = left_out(first_fn, args, kwargs)
    extra = sorted(set(kwargs) - set(first_fn.graph.param_names))
    parts = []
    if missing:
        parts.append(f"called without {', '.join(missing)} (traced with {owner_name}'s "
                     f"default{'s' if len(missing) > 1 else ''})")
    if extra:
        parts.append(f"called with {', '.join(extra)} too")
    return "; ".join(parts) or "called with other arguments"
