"""Hostile files of issue 21, items 1-3: what a file's graph may contain and what a call of a loaded
program may allocate. Each is a real save of a small traced program (``BASES``) with its document
edited and the CRC recomputed. Each case says what must happen:

    reject        load raises LoadError whose message holds ``fragment``
    call_refused  the file loads (its sizes follow the inputs) and calling it raises ``fragment``'s
                  error type (BudgetError / GuardError) before the op allocates

Classes: ops off the allow-list (private helpers and ops that trust their arguments: crashes before),
enum-like ints out of range (unwritten memory before), running statistics of the wrong size,
allocations at the traced sizes (load) and at call time (int arithmetic on traced sizes, products
whose operands follow a traced size).
"""
from __future__ import annotations

import io
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import tracejit
from security_testlib import graphs, module, node, rewrite


class _BN(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(x)


class _LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 4)

    def forward(self, x):
        return self.rnn(x)[0]


# name -> (program, input spec "seed:shape;shape" for the child's call)
BASES = {
    "grid": (lambda x, g: F.grid_sample(x, g, align_corners=False), "1:1,2,4,4;1,3,3,2"),
    "loss": (lambda x, y: F.mse_loss(x, y) + F.l1_loss(x, y, reduction="sum"), "1:4;4"),
    "bn": (_BN, "1:2,3,4,4"),
    "sizes": (lambda x: torch.zeros([x.size(0) * 3, 4]) + x.sum(), "1:3,2"),
    "expand": (lambda x: x.expand(2, -1, -1).contiguous(), "1:3,4"),
    "pad": (lambda x: F.pad(x, (1, 1)), "1:3,4"),
    "onehot": (lambda x: F.one_hot((x > 0).long(), 2), "1:3,4"),
    "conv": (lambda: nn.Conv2d(2, 3, 3, padding=1), "1:1,2,5,5"),
    "unfold": (lambda x: F.unfold(x, kernel_size=2), "1:1,2,5,5"),
    "vander": (lambda x: torch.linalg.vander(x, N=3), "1:4"),
    "einsum": (lambda x: torch.einsum("i,j->ij", x, x), "1:64"),
    "cart": (lambda x: torch.cartesian_prod(x, x), "1:16"),
    "comb": (lambda x: torch.combinations(x, r=2), "1:32"),
    "lstm": (_LSTM, "1:5,2,3"),
    # products whose operands' sizes follow a traced int n (2 x the input's length): [n, 1] x [1, n], and
    # batch dimensions [n, 1] and [1, n] broadcast
    "matmul": (lambda x: (lambda n: x[:1].expand(n).view(n, 1) @ x[:1].expand(n).view(1, n))(x.size(0) * 2), "1:8"),
    "bmm": (lambda x: (lambda n: torch.matmul(x[:1].expand(n).view(n, 1, 1, 1),
                                              x[:1].expand(n).view(1, n, 1, 1)))(x.size(0) * 2), "1:8"),
    "linear": (lambda x: (lambda n: F.linear(x[:1].expand(n).view(n, 1), x[:1].expand(n).view(n, 1)))(x.size(0) * 2),
               "1:8"),
}


def _shapes(spec: str):
    return [tuple(int(d) for d in s.split(",")) for s in spec.partition(":")[2].split(";")]


def saved_bases() -> dict:
    """{base name: (traced program, file bytes, input spec)}."""
    out = {}
    torch.manual_seed(0)
    for name, (program, spec) in BASES.items():
        if isinstance(program, type) or program.__code__.co_argcount == 0:
            program = program().eval()
        example = tuple(torch.randn(*s) for s in _shapes(spec))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = tracejit.trace(program, example)
        buf = io.BytesIO()
        tracejit.save(traced, buf)
        out[name] = (traced, buf.getvalue(), spec)
    return out


def _edit(raw, fn, edit_tensors=None):
    return rewrite(raw, edit_doc=fn, edit_tensors=edit_tensors)


def _set_args(prefix, args, kwargs=None, op=None, target=None, which=0):
    def edit(doc):
        n = [x for g in graphs(doc) for x in g["nodes"] if x["op"].startswith(prefix)][which]
        n["args"] = args
        if kwargs is not None:
            n["kwargs"] = kwargs
        if op is not None:
            n["op"] = op
        if target is not None:
            n["target"] = target
    return edit


# ops that are not on the allow-list: private helpers and public ops that trust their arguments
# (the first ones crashed the process, returned unwritten memory or skip checks), and layouts
OFF_LIST = """_sobol_engine_draw _sobol_engine_ff_ _sobol_engine_scramble_ _sobol_engine_initialize_state_
    _weight_norm_interface _cummax_helper _cummin_helper segment_reduce fused_moving_avg_obs_fake_quant
    _fused_moving_avg_obs_fq_helper batch_norm_update_stats native_batch_norm _native_batch_norm_legit
    _native_batch_norm_legit_no_training batch_norm_elemt batch_norm_stats batch_norm_gather_stats grid_sampler_2d
    grid_sampler_3d _grid_sampler_2d_cpu_fallback embedding_bag _embedding_bag _embedding_bag_forward_only
    embedding_renorm _index_put_impl_ _unsafe_index _unsafe_index_put _fft_r2c _fft_c2c ctc_loss _ctc_loss
    native_layer_norm native_group_norm _softmax_backward_data _masked_softmax _native_multi_head_attention
    _pdist_forward _cdist_forward to_dense _make_dual _histogramdd_from_bin_cts unsafe_split unsafe_chunk""".split()


def off_list_cases(b):
    raw = b["loss"][1]
    return [(f"off_list_{op}", _edit(raw, _set_args("aten::add", [{"v": 0}, {"v": 1}], [], f"aten::{op}.default",
                                                    f"fn:torch.{op}")), "reject", "loss", "not on the allow-list")
            for op in OFF_LIST]


def enum_cases(b):
    grid, loss = b["grid"][1], b["loss"][1]
    cases = []
    for mode in (3, 7, -1, 2 ** 31, 100):
        cases.append((f"grid_interpolation_mode_{mode}", _edit(grid, _set_args(
            "aten::grid_sampler", [{"v": 0}, {"v": 1}, mode, 0, False])), "reject", "grid", "interpolation mode"))
    for mode in (3, 9, -1):
        cases.append((f"grid_padding_mode_{mode}", _edit(grid, _set_args(
            "aten::grid_sampler", [{"v": 0}, {"v": 1}, 0, mode, False])), "reject", "grid", "padding mode"))
    cases.append(("grid_modes_traced", _edit(grid, _set_args(
        "aten::grid_sampler", [{"v": 0}, {"v": 1}, {"v": 0}, 0, False])), "reject", "grid", "grid_sampler"))
    for op, which in (("aten::mse_loss", 4), ("aten::l1_loss", 9)):
        for red in (3, 7, -1, 100):
            cases.append((f"{op[6:]}_reduction_{red}", _edit(loss, _set_args(
                op, [{"v": which}, {"v": which + 1}, red])), "reject", "loss", "loss reduction"))
    return cases


def _shrink_buffer(path_attr, name):
    """The BatchNorm's ``name`` stored with 1 element, and the graph's type for it to match."""
    def edit_doc(doc):
        for n in (x for g in graphs(doc) for x in g["nodes"]):
            if n["op"] == "tracejit::get_attr" and n["attrs"]["path"] == name:
                n["outputs"][0]["shape"] = [1]

    def edit_tensors(tensors):
        for k in list(tensors):
            if k.endswith(name):
                tensors[k] = torch.ones(1)
    return edit_doc, edit_tensors


def norm_cases(b):
    raw = b["bn"][1]
    cases = []
    for name in ("running_mean", "running_var", "weight", "bias"):
        edit_doc, edit_tensors = _shrink_buffer("bn", name)
        cases.append((f"batch_norm_1_element_{name}", _edit(raw, edit_doc, edit_tensors), "reject", "bn",
                      "but the input has 3 channels"))
    args = [{"v": 0}, {"v": 1}, {"v": 2}, {"v": 3}, {"v": 4}, False, 0.1, 1e-05]
    for op in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training"):
        cases.append((f"batch_norm_as_{op}", _edit(raw, _set_args("aten::batch_norm", args, [], f"aten::{op}.default",
                                                                  f"fn:torch.{op}")), "reject", "bn",
                      "not on the allow-list"))
    return cases


def load_budget_cases(b):
    """Allocations a node asks for at the traced sizes: refused at load."""
    g = lambda k: b[k][1]   # noqa: E731
    x = {"v": 0}
    c = []
    for n in (2 ** 25, 2 ** 22, 10 ** 9):
        c.append((f"expand_{n}", _edit(g("expand"), _set_args("aten::expand", [x, n, -1, -1])), "expand"))
    for pads in ([2 ** 24, 2 ** 24], [10, 10, 2 ** 23, 2 ** 23], [0, 2 ** 30]):
        c.append((f"pad_{'_'.join(map(str, pads))}", _edit(g("pad"), _set_args(
            "aten::pad", [x, {"tuple": pads}, "constant", None])), "pad"))
    for k in (2 ** 25, 2 ** 22):
        c.append((f"one_hot_{k}", _edit(g("onehot"), _set_args("aten::one_hot", [{"v": 2}, k])), "onehot"))
    conv = [x, {"v": 1}, {"v": 2}, {"tuple": [1, 1]}, None, {"tuple": [1, 1]}, 1]
    for name, pad in (("4096", [4096, 4096]), ("1_by_2_20", [1, 2 ** 20])):
        args = list(conv)
        args[4] = {"tuple": pad}
        c.append((f"conv_padding_{name}", _edit(g("conv"), _set_args("aten::conv2d", args)), "conv"))
    for pad in ([4096, 4096], [2 ** 14, 2 ** 14]):
        c.append((f"im2col_padding_{pad[0]}", _edit(g("unfold"), _set_args(
            "aten::im2col", [x, {"tuple": [2, 2]}, {"tuple": [1, 1]}, {"tuple": pad}, {"tuple": [1, 1]}])), "unfold"))
    for n in (2 ** 25, 2 ** 24):
        c.append((f"vander_{n}", _edit(g("vander"), _set_args("aten::linalg_vander", [x], [["N", n]])), "vander"))
    for eq, k in (("a,b,c,d,e->abcde", 5), ("a,b,c,d,e,f->fedcba", 6)):
        c.append((f"einsum_{k}_operands", _edit(g("einsum"), _set_args("aten::einsum", [eq, {"tuple": [x] * k}])),
                  "einsum"))
    for k in (7, 6):
        c.append((f"cartesian_prod_{k}", _edit(g("cart"), _set_args("aten::cartesian_prod", [{"tuple": [x] * k}])),
                  "cart"))
    for r in (6, 5):
        c.append((f"combinations_r_{r}", _edit(g("comb"), _set_args("aten::combinations", [x], [["r", r]])), "comb"))
    c.append(("zeros_traced_by_2_30", _edit(g("sizes"), _set_args("aten::zeros", [[{"v": 2}, 2 ** 30]])), "sizes"))
    lstm_swapped = [x, {"tuple": [{"v": 2}, {"v": 3}]}, [{"v": 14}, {"v": 13}, {"v": 15}, {"v": 16}],
                    True, 1, 0.0, False, False, False]
    c.append(("lstm_weights_swapped", _edit(g("lstm"), _set_args("aten::lstm", lstm_swapped)), "lstm"))
    lstm_layers = list(lstm_swapped)
    lstm_layers[2], lstm_layers[4] = [{"v": 13}, {"v": 14}, {"v": 15}, {"v": 16}], 2
    c.append(("lstm_two_layers_one_set_of_weights", _edit(g("lstm"), _set_args("aten::lstm", lstm_layers)), "lstm"))
    return [(name, raw, "reject", base, "") for name, raw, base in c]


def call_budget_cases(b):
    """Sizes computed from the input at call time: the file loads; the call is refused before it allocates."""
    raw = b["sizes"][1]
    x, n = {"v": 0}, {"v": 2}   # the input, and size(0) * <the edited constant>
    c = []

    def int_op(op, target, right, name):
        c.append((name, _edit(raw, _set_args("aten::mul", [{"v": 1}, right], [], op, target)), "BudgetError"))

    for e in (10 ** 18, 64, 2 ** 62):
        int_op("aten::pow.int", "op:**", e, f"int_pow_{e}")
    int_op("aten::pow.int", "op:r**", 10 ** 18, "int_rpow_1e18")
    for s in (2 ** 33, 64, 40):
        int_op("aten::__lshift__.int", "op:<<", s, f"int_lshift_{s}")
    for m in (2 ** 30, 2 ** 40, 2 ** 61):
        int_op("aten::mul.int", "op:*", m, f"int_mul_{m}_then_zeros")
    for op, target, args, name in (("aten::pow.int", "op:**", [3, 10 ** 18], "int_pow_two_constants"),
                                   ("aten::__lshift__.int", "op:<<", [3, 2 ** 40], "int_lshift_two_constants")):
        c.append((name, _edit(raw, _set_args("aten::mul", args, [], op, target)), "BudgetError"))   # ran for ever

    def alloc(name, op, target, args, kwargs=(), mul=2 ** 25):
        def edit(doc):
            _set_args("aten::mul", [{"v": 1}, mul])(doc)
            _set_args("aten::zeros", args, [list(p) for p in kwargs], op, target)(doc)
        c.append((name, _edit(raw, edit), "BudgetError"))

    alloc("call_expand", "aten::expand.default", "method:expand", [x, n, -1, -1])
    alloc("call_constant_pad", "aten::constant_pad_nd.default", "fn:torch.constant_pad_nd", [x, [n, 0]])
    alloc("call_pad", "aten::pad.default", "fn:torch._C._nn.pad", [x, [0, n], "constant", None])
    alloc("call_repeat", "aten::repeat.default", "method:repeat", [x, [n, 1]])
    alloc("call_arange", "aten::arange.default", "fn:torch.arange", [n], mul=2 ** 40)
    alloc("call_eye", "aten::eye.default", "fn:torch.eye", [n], mul=2 ** 20)
    alloc("call_new_zeros", "aten::new_zeros.default", "method:new_zeros", [x, [n, 4]])
    alloc("call_full", "aten::full.default", "fn:torch.full", [[n, 4], 1.0])
    alloc("call_ones", "aten::ones.default", "fn:torch.ones", [[n, 4]])
    alloc("call_randn", "aten::randn.default", "fn:torch.randn", [[n, 4]])
    alloc("call_one_hot", "aten::one_hot.default", "fn:torch._C._nn.one_hot", [x, n])
    alloc("call_linspace", "aten::linspace.default", "fn:torch.linspace", [0.0, 1.0, n])
    return [(name, raw, "call_refused", "sizes", err) for name, raw, err in c]


def product_cases(b):
    """Products of operands sized by a traced int, each operand within budget (an expanded view of one
    element): the file loads; the call with n = 2^24 is refused before the product allocates n^2."""
    return [(f"{base}_n_2_24", _edit(b[base][1], _set_args("aten::mul", [{"v": 1}, 2 ** 21])), "call_refused", base,
             "BudgetError") for base in ("matmul", "bmm", "linear")]


def all_cases(b):
    return off_list_cases(b) + enum_cases(b) + norm_cases(b) + load_budget_cases(b) + call_budget_cases(b) + \
        product_cases(b)
