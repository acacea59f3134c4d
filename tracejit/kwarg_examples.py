"""Keyword example inputs of a trace: checked (a dict, or a mapping keyed by names such as a tokenizer's
``BatchEncoding``) and ordered as the traced function's parameters."""
from __future__ import annotations

import inspect
from collections.abc import Mapping

from .errors import ArgumentTypeError


def as_kwarg_dict(example):
    """``example`` where a dict, its items where a mapping keyed by names only (``BatchEncoding`` is a
    ``UserDict``: what ``**encoding`` passes at call time), else None."""
    if isinstance(example, dict) or not isinstance(example, Mapping):
        return example if isinstance(example, dict) else None
    return dict(example.items()) if all(isinstance(k, str) for k in example.keys()) else None


def kwarg_examples(example_kwarg_inputs, fn) -> dict:
    """``example_kwarg_inputs`` checked (a dict, as torch.jit requires, or a mapping of names: a tokenizer's
    ``BatchEncoding``, which torch.jit refuses) and ordered as ``fn``'s parameters, so that a positional call
    of the traced program binds in signature order, as torch.jit's does."""
    given = as_kwarg_dict(example_kwarg_inputs)
    if given is None:
        raise ArgumentTypeError(f"example_kwarg_inputs should be a dict of keyword arguments (parameter name -> "
                                f"example value); got {type(example_kwarg_inputs).__name__}")
    try:
        order = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return dict(given)
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(given.items(), key=lambda kv: rank.get(kv[0], len(order))))
