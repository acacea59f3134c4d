"""Hostile files of the round-20 attack round (/work/wt/hostile20_findings.md has the whole table): each an
edit of a real save of a small traced program, the CRC recomputed, that before this round's fixes loaded and
then failed at the call with a raw ATen error or read gigabytes into Python objects, or carried a megabyte
string into every tool that prints the ledger:

- **ledger**: a ledger entry's ``value`` of any length, depth or JSON type was kept as it was;
- **reads**: a ``tolist`` guard (or a call guard repeating ``tolist`` / ``numpy``) of a loaded program turned a
  tensor the file makes within its size budget (``zeros(2**24)``) into Python floats (~60 B each: 1 GB);
- **constants**: pooling kernel / stride / padding / dilation, ``pixel_shuffle`` / ``channel_shuffle`` factors
  and ``roll`` shifts / dims that the kernel refuses loaded, then raised a raw RuntimeError at the call;
- **binding**: ints passed positionally after an int list (``conv2d(x, w, b, 1, 20000)``) were bound as one list
  (``stride=[1, 20000]``, padding 0), so the size rule missed the padding: 14 G elements asked of the allocator;
- **devices**: a device constant of a type tracejit traces on but this machine lacks (``xla``, ``hpu``, ``ipu``,
  ``cuda:99``) loaded, then failed at the call.

A case is ``(name, file bytes, input spec, expect)``: ``reject`` (LoadError at load) or ``call_refused``
(loads; the call raises GuardError / BudgetError before the op runs). ``legit_cases`` are the same programs
unedited: they load and compute what eager computes.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

import tracejit
from security_testlib import graphs, rewrite, traced_bytes

X = "1:3,4"
IMAGE = "1:1,4,8,8"


def _save(fn, *example) -> bytes:
    return traced_bytes(fn, example)


def _nodes(doc, prefix):
    return [n for g in graphs(doc) for n in g["nodes"] if n["op"].startswith(prefix)]


def _arg(prefix, i, value):
    return lambda doc: _nodes(doc, prefix)[0]["args"].__setitem__(i, value)


def _ledger_value(value):
    def edit(doc):
        doc["program"]["ledger"] = [{"kind": "value", "message": "m", "source": None, "value": value}]
    return edit


def _nested(depth):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


def _device(name):
    def edit(doc):
        n = _nodes(doc, "aten::zeros")[0]
        n["kwargs"] = [[k, {"device": name} if k == "device" else v] for k, v in n["kwargs"]]
    return edit


def _call_guard(call):
    def edit(doc):
        g = _nodes(doc, "tracejit::guard")[0]
        g["attrs"]["test"], g["attrs"]["call"] = "call", call
        _nodes(doc, "aten::zeros")[0]["args"][0] = [2 ** 24]
    return edit


def _tolist(x):
    v = torch.zeros(4).tolist()
    return x + v[0]


def _pool(x):
    return F.max_pool2d(x, 2)


def _avg(x):
    return F.avg_pool2d(x, 2)


def _shuffle(x):
    return F.pixel_shuffle(x, 2)


def _channels(x):
    return F.channel_shuffle(x, 2)


_WEIGHT = torch.randn(2, 1, 3, 3)


def _conv_positional(x):
    return torch.conv2d(x, _WEIGHT, None, 1, 1, 1, 1)


def _roll(x):
    return torch.roll(x, (1, 2), (2, 3))


IMAGE_EXAMPLE = (torch.randn(1, 4, 8, 8),)

# name -> (program, example inputs, edit, expect)
PROGRAMS = {
    # ledger values
    "ledger_value_megabyte_string": (_tolist, (torch.randn(3, 4),), _ledger_value("A" * 1_000_000), "reject"),
    "ledger_value_nested_40": (_tolist, (torch.randn(3, 4),), _ledger_value(_nested(40)), "reject"),
    "ledger_value_nested_900": (_tolist, (torch.randn(3, 4),), _ledger_value(_nested(900)), "reject"),
    "ledger_value_object": (_tolist, (torch.randn(3, 4),), _ledger_value({"__class__": "os.system"}), "reject"),
    "ledger_value_long_item": (_tolist, (torch.randn(3, 4),), _ledger_value([1, ["x" * 5000]]), "reject"),
    # reads into Python objects
    "tolist_of_2_24_zeros": (_tolist, (torch.randn(3, 4),), _arg("aten::zeros", 0, [2 ** 24]), "call_refused"),
    "call_guard_tolist_2_24": (_tolist, (torch.randn(3, 4),), _call_guard("method:tolist"), "call_refused"),
    "call_guard_numpy_2_24": (_tolist, (torch.randn(3, 4),), _call_guard("method:numpy"), "call_refused"),
    # constants the kernels refuse
    "max_pool_kernel_0": (_pool, IMAGE_EXAMPLE, _arg("aten::max_pool2d", 1, [0, 0]), "reject"),
    "max_pool_stride_0": (_pool, IMAGE_EXAMPLE, _arg("aten::max_pool2d", 2, [0, 0]), "reject"),
    "max_pool_padding_over_half": (_pool, IMAGE_EXAMPLE, _arg("aten::max_pool2d", 3, [5, 5]), "reject"),
    "max_pool_dilation_0": (_pool, IMAGE_EXAMPLE, _arg("aten::max_pool2d", 4, [0, 0]), "reject"),
    "max_pool_kernel_over_input": (_pool, IMAGE_EXAMPLE, _arg("aten::max_pool2d", 1, [64, 64]), "reject"),
    "avg_pool_kernel_negative": (_avg, IMAGE_EXAMPLE, _arg("aten::avg_pool2d", 1, [-2, -2]), "reject"),
    "pixel_shuffle_0": (_shuffle, IMAGE_EXAMPLE, _arg("aten::pixel_shuffle", 1, 0), "reject"),
    "pixel_shuffle_negative": (_shuffle, IMAGE_EXAMPLE, _arg("aten::pixel_shuffle", 1, -2), "reject"),
    "pixel_shuffle_3_of_4_channels": (_shuffle, IMAGE_EXAMPLE, _arg("aten::pixel_shuffle", 1, 3), "reject"),
    "channel_shuffle_0": (_channels, IMAGE_EXAMPLE, _arg("aten::channel_shuffle", 1, 0), "reject"),
    "channel_shuffle_3_of_4": (_channels, IMAGE_EXAMPLE, _arg("aten::channel_shuffle", 1, 3), "reject"),
    "roll_shifts_dims_mismatch": (_roll, IMAGE_EXAMPLE, _arg("aten::roll", 1, [1, 2, 3]), "reject"),
    "roll_dim_out_of_range": (_roll, IMAGE_EXAMPLE, _arg("aten::roll", 2, [2, 9]), "reject"),
    # positional ints bound one by one
    "conv2d_positional_padding_20000": (_conv_positional, (torch.randn(1, 1, 8, 8),),
                                        _arg("aten::conv2d", 4, 20000), "reject"),
    # devices this machine lacks
    **{f"device_{name.replace(':', '_')}": (lambda x: torch.zeros(3, 4, device="cpu") + x, (torch.randn(3, 4),),
                                            _device(name), "reject")
       for name in ("xla", "hpu", "ipu", "cuda:99")},
}


def hostile_cases() -> list:
    out = []
    for name, (fn, example, edit, expect) in PROGRAMS.items():
        spec = IMAGE if example is IMAGE_EXAMPLE else "1:1,1,8,8" if fn is _conv_positional else X
        out.append((name, rewrite(_save(fn, *example), edit_doc=edit), spec, expect))
    return out


# unedited programs of the same kinds: (program, example, input spec); they load and compute what eager computes
LEGIT = {
    "legit_tolist": (_tolist, (torch.randn(3, 4),), X),
    "legit_pool_shuffle_roll": (lambda x: F.max_pool2d(x, 2, 1, 1).sum() + F.avg_pool2d(x, 3, 2, 1).sum()
                                + F.pixel_shuffle(x, 2).sum() + F.channel_shuffle(x, 2).sum()
                                + torch.roll(x, (1, -2), (2, 3)), IMAGE_EXAMPLE, IMAGE),
    "legit_conv_positional": (_conv_positional, (torch.randn(1, 1, 8, 8),), "1:2,1,9,7"),
    "legit_conv_gated": (torch.nn.Conv2d(4, 6, 3, padding=2, dilation=2).eval(), IMAGE_EXAMPLE, IMAGE),
}


def legit_cases() -> list:
    """``(name, file bytes, input spec, eager's output sum on those inputs)``."""
    from security_testlib import output_sum
    out = []
    for name, (fn, example, spec) in LEGIT.items():
        out.append((name, _save(fn, *example), spec, output_sum(fn, spec)))
    return out
