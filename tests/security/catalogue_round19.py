"""Hostile files of the round-19 attack round (/work/wt/hostile19_findings.md has the whole table): each an
edit of a real save of a small traced program, the CRC recomputed, that crashed, hung or grew memory past
the budget before the fixes of serialize/op_sizes_values.py and constants.device_constant:

- **extent**: an empty tensor viewed to a huge shape (``x[:0].view(2**28, 0)``, ``unflatten``, ``repeat``,
  ``pixel_unshuffle``) held no element, so no rule counted it, and a reduction over its zero (``sum(1)``,
  ``det``, ``linear`` then ``sum``) made 2^28 elements from a 12-element input (1 GB; 2^32 is 16 GB);
- **pieces**: ``tensor_split(x, 2**21)``, ``chunk`` / ``unbind`` of a long empty tensor (its trace guard
  deleted) made 2^21 tensor objects (1.4 GB, 4 CPU s) before unpacking into two names failed;
- **values**: ``div(INT64_MIN, -1, rounding_mode="trunc")`` (int32 too) killed the process with SIGFPE,
  ``matrix_power(x, -2**63)`` and ``binomial`` with a NaN count never returned, ``mvlgamma(x, 2**24)``
  made 2^24 values per element;
- **devices**: ``lazy`` / ``opengl`` / ``privateuseone`` devices reached ATen's internal asserts or an import
  of a module named after the device at call time; now refused at load.

A case is ``(name, file bytes, input spec, expect)``: ``reject`` (LoadError at load) or ``call_refused``
(loads; the call raises BudgetError / GuardError before the op runs). ``legit_cases`` are the same programs
unedited: they load and compute what eager computes.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

import tracejit
from security_testlib import graphs, rewrite, traced_bytes, both

X = "1:3,4"


def _save(fn, *example) -> bytes:
    return traced_bytes(fn, example or (torch.randn(3, 4),))


def _nodes(doc, prefix):
    return [n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(prefix)]


def _args(prefix, *args, which=0):
    """Set the arguments of the ``which``-th node whose op starts with ``prefix`` (``args[0] is None``: keep the
    node's first argument, its tensor)."""
    def edit(doc):
        n = _nodes(doc, prefix)[which]
        n["args"] = [n["args"][0], *args[1:]] if args and args[0] is None else list(args)
    return edit


_both = both


def _no_guards(doc):
    for g in graphs(doc):
        g["nodes"] = [n for n in g["nodes"] if n["op"] != "tracejit::guard"]   # guards define no value


def _fill(which, value):
    return lambda doc: _nodes(doc, "aten::full")[which]["args"].__setitem__(1, value)


def _device(name):
    def edit(doc):
        n = _nodes(doc, "aten::zeros")[0]
        n["kwargs"] = [[k, {"device": name} if k == "device" else v] for k, v in n["kwargs"]]
    return edit


# name -> (program, example inputs or (), edit, expect)
PROGRAMS = {
    # extent: an empty tensor of a huge shape, then a reduction over its zero
    "extent_view_sum": (lambda x: x[:0].view(2, 0).sum(1), (), _args("aten::view", None, 2 ** 28, 0), "reject"),
    "extent_unflatten_sum": (lambda x: x[:0].flatten().unflatten(0, (2, 0)).sum(1), (),
                             lambda d: _nodes(d, "aten::unflatten")[0]["args"].__setitem__(2, [2 ** 28, 0]), "reject"),
    "extent_repeat_sum": (lambda x: x[:0].repeat(1, 2).sum(0), (), _args("aten::repeat", None, [1, 2 ** 26]),
                          "reject"),
    "extent_det": (lambda x: torch.linalg.det(x[:0].view(2, 0, 0)), (), _args("aten::view", None, 2 ** 28, 0, 0),
                   "reject"),
    "extent_pixel_unshuffle_sum": (lambda x: F.pixel_unshuffle(x[:0].view(1, 1, 0, 4), 2).sum(2), (),
                                   _both(_args("aten::view", None, 1, 1, 0, 2 ** 14),
                                         _args("aten::pixel_unshuffle", None, 2 ** 14)), "reject"),
    "extent_view_traced_sum": (lambda x: x[:0].view(x.size(0) * 2, 0).sum(1), (),
                               lambda d: _nodes(d, "aten::mul")[0]["args"].__setitem__(1, 2 ** 26), "call_refused"),
    "extent_linear_sum": (lambda x, w: F.linear(x[:0, :1].reshape(2, 0, 1), w).sum(1),
                          (torch.randn(3, 4), torch.randn(256, 1)), _args("aten::reshape", None, 2 ** 22, 0, 1),
                          "call_refused"),
    # pieces: more tensors than the node unpacks
    "pieces_tensor_split_2_21": (lambda x: torch.tensor_split(x, 2), (), _args("aten::tensor_split", None, 2 ** 21),
                                 "reject"),
    "pieces_chunk_2_22": (lambda x: x[:0].view(2, 0).chunk(2), (),
                          _both(_args("aten::view", None, 2 ** 22, 0), _args("aten::chunk", None, 2 ** 22)),
                          "call_refused"),
    "pieces_unbind_unguarded": (lambda x: x[:0].view(2, 0).unbind(0), (),
                                _both(_no_guards, _args("aten::view", None, 2 ** 21, 0)), "call_refused"),
    # values a kernel trusts
    "mvlgamma_p_2_24": (lambda x: torch.mvlgamma(x.abs() + 10, 2), (), _args("aten::mvlgamma", None, 2 ** 24),
                        "reject"),
    "matrix_power_int64_min": (lambda x: torch.matrix_power(x[:, :3], 2), (), _args("aten::matrix_power", None, -2 ** 63),
                               "reject"),
    "matrix_power_traced_int64_min": (lambda x: torch.linalg.matrix_power(x[:, :3], x.size(0) * 0 + 7), (),
                                      lambda d: _nodes(d, "aten::add")[0]["args"].__setitem__(1, -2 ** 63),
                                      "call_refused"),
    "div_trunc_int64_min_by_minus_1": (lambda x: torch.div(torch.full((4,), 7), torch.full((4,), 2),
                                                           rounding_mode="trunc") + x.sum().long(), (),
                                       _both(_fill(0, -2 ** 63), _fill(1, -1)), "call_refused"),
    "div_trunc_int32_min_by_minus_1": (lambda x: torch.div(torch.full((4,), 7, dtype=torch.int32), -3,
                                                           rounding_mode="trunc") + x.sum().int(), (),
                                       _both(_fill(0, -2 ** 31),
                                             lambda d: _nodes(d, "aten::div")[0]["args"].__setitem__(1, -1)),
                                       "call_refused"),
    "binomial_nan_count": (lambda x: torch.binomial(torch.full((4,), 3.0), torch.full((4,), 0.5)) + x.sum(), (),
                           _fill(0, {"float": "nan"}), "call_refused"),
    # devices this tracejit does not trace on
    **{f"device_{name}": (lambda x: torch.zeros(3, 4, device="cpu") + x, (), _device(name), "reject")
       for name in ("lazy", "opengl", "privateuseone", "vulkan")},
}


def hostile_cases() -> list:
    out = []
    for name, (fn, example, edit, expect) in PROGRAMS.items():
        spec = "1:3,4;256,1" if len(example) == 2 else X
        out.append((name, rewrite(_save(fn, *example), edit_doc=edit), spec, expect))
    return out


# unedited programs of the same kinds: (program, input spec); they load and compute what eager computes
LEGIT = {
    "legit_trunc_division": (lambda x: torch.div((x * 100).long(), -3, rounding_mode="trunc"), X),
    "legit_split_chunk_unbind": (lambda x: torch.tensor_split(x, 2)[1].sum() + x.chunk(2)[0].sum() + x.unbind(1)[2],
                                 X),
    "legit_view_unflatten": (lambda x: x.view(12).unflatten(0, (2, 6)).sum(1) + x[:0].view(0, 4).sum(0).sum(), X),
    "legit_mvlgamma_matrix_power": (lambda x: torch.mvlgamma(x.abs() + 3, 3).sum() +
                                    torch.matrix_power(x[:, :3], -2).sum(), X),
    "legit_zeros_cpu": (lambda x: torch.zeros(3, 4, device="cpu") + x, X),
}


def legit_cases() -> list:
    """``(name, file bytes, input spec, eager's output sum on those inputs)``."""
    from security_testlib import output_sum
    out = []
    for name, (fn, spec) in LEGIT.items():
        raw = _save(fn)
        out.append((name, raw, spec, output_sum(fn, spec)))
    return out
