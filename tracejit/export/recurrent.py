"""ONNX for nn.LSTM, nn.GRU and nn.RNN (``aten::lstm.input``, ``aten::gru.input``, ``aten::rnn_tanh.input``,
``aten::rnn_relu.input``): one ONNX ``LSTM`` / ``GRU`` / ``RNN`` node per layer.

torch_lib's LSTM and GRU conversions read the hidden size from the initial state's ONNX shape; a module
called without a state makes its zeros from the input's batch size, a dynamic axis, so that shape is
unknown and the conversion failed ("Unsupported attribute type: SymbolicDim") for every nn.LSTM / nn.GRU
called as ``lstm(x)`` (timm's Sequencer2D); torch_lib has no ``rnn_tanh`` / ``rnn_relu`` at all. Here the
hidden size is the recurrent weight's second dimension (``W_hh`` is [gates * H, H]), fixed by the module.

Torch stores the gates of a layer as [i, f, g, o] (LSTM) and [r, z, n] (GRU); ONNX wants [i, o, f, c] and
[z, r, h], and torch's GRU applies the reset gate after the recurrent product (``linear_before_reset=1``).
Refused (NotImplementedError, an ExportError naming the line): an LSTM with ``proj_size`` (ONNX's LSTM has
no projection) and dropout between layers in training mode (the ONNX model would not drop).
"""
from __future__ import annotations

from ._deps import require
from .special_ops import handles

ir = require("onnx_ir")
from onnxscript.onnx_opset import opset18 as op  # noqa: E402

# ATen op -> (gates per layer, torch's gate chunks in ONNX's order)
_KINDS = {"lstm": (4, (0, 3, 1, 2)), "gru": (3, (1, 0, 2)), "rnn_tanh": (1, (0,)), "rnn_relu": (1, (0,))}


def _gates_in_onnx_order(w, hidden: int, order) -> ir.Value:
    if len(order) == 1:
        return w
    parts = [op.Slice(w, op.Constant(value_ints=[k * hidden]), op.Constant(value_ints=[(k + 1) * hidden]),
                      op.Constant(value_ints=[0])) for k in order]
    return op.Concat(*parts, axis=0)


def _stacked(values: list) -> ir.Value:
    """[directions, ...]: each direction's tensor with a leading axis, concatenated."""
    return op.Concat(*[op.Unsqueeze(v, op.Constant(value_ints=[0])) for v in values], axis=0)


@handles("aten::lstm.input", "aten::gru.input", "aten::rnn_tanh.input", "aten::rnn_relu.input")
def recurrent(cx, node, args, kwargs):
    kind = node.op.split("::")[1].split(".")[0]
    gates, order = _KINDS[kind]
    x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first = args[:9]
    states = list(hx) if kind == "lstm" else [hx]
    dirs = 2 if bidirectional else 1
    per_direction = 4 if has_biases else 2
    if len(params) != num_layers * dirs * per_direction:
        raise NotImplementedError("an LSTM with proj_size (ONNX's LSTM has no projection)")
    if train and dropout:
        raise NotImplementedError(f"{kind} with dropout between layers in training mode (the ONNX model would "
                                  "not drop: call .eval() before tracing)")
    hidden = node.args[2][1].type.shape[1]   # W_hh: [gates * H, H]
    if not isinstance(hidden, int):
        raise NotImplementedError(f"{kind} whose hidden size is not fixed by its weights")
    seq = op.Transpose(x, perm=[1, 0, 2]) if batch_first else x
    finals = [[] for _ in states]
    for layer in range(num_layers):
        w, r, b = [], [], []
        for d in range(dirs):
            p = params[(layer * dirs + d) * per_direction:(layer * dirs + d + 1) * per_direction]
            w.append(_gates_in_onnx_order(p[0], hidden, order))
            r.append(_gates_in_onnx_order(p[1], hidden, order))
            if has_biases:
                b.append(op.Concat(_gates_in_onnx_order(p[2], hidden, order),
                                   _gates_in_onnx_order(p[3], hidden, order), axis=0))
        begin, end = op.Constant(value_ints=[layer * dirs]), op.Constant(value_ints=[(layer + 1) * dirs])
        initial = [op.Slice(s, begin, end, op.Constant(value_ints=[0])) for s in states]
        inputs = [seq, _stacked(w), _stacked(r), _stacked(b) if has_biases else None, None, *initial]
        attrs = dict(hidden_size=hidden, direction="bidirectional" if bidirectional else "forward")
        if kind == "lstm":
            y, *last = op.LSTM(*inputs, **attrs)
        elif kind == "gru":
            y, *last = op.GRU(*inputs, linear_before_reset=1, **attrs)
        else:
            y, *last = op.RNN(*inputs, activations=["Relu" if kind == "rnn_relu" else "Tanh"] * dirs, **attrs)
        for i, value in enumerate(last):
            finals[i].append(value)
        # Y: [seq, directions, batch, H] -> [seq, batch, directions * H]
        seq = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, dirs * hidden]))
    out = op.Transpose(seq, perm=[1, 0, 2]) if batch_first else seq
    return [out] + [v[0] if len(v) == 1 else op.Concat(*v, axis=0) for v in finals]
