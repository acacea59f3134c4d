"""A MaxPool whose indices nobody reads is exported with one output, so onnxruntime's NCHWc
layout keeps a conv net blocked across it (ResNet's stem: conv -> max_pool -> conv)."""
import warnings

import pytest
import torch
from torch import nn

import tracejit

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 7, 2, 3)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(16, 16, 3, 1, 1)

    def forward(self, x):
        return torch.relu(self.conv2(self.pool(torch.relu(self.conv1(x)))))


def _trace(m, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(m, x)


def _ops(proto):
    return [(n.op_type, len(n.output)) for n in proto.graph.node]


def test_unused_indices_are_dropped_and_values_stay_eager():
    torch.manual_seed(0)
    m = Stem().eval()
    proto = tracejit.export_onnx(_trace(m, torch.randn(1, 3, 32, 32)))
    assert ("MaxPool", 1) in _ops(proto) and ("MaxPool", 2) not in _ops(proto)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(2, 3, 45, 37), (1, 3, 64, 64)]:
        x = torch.randn(shape)
        got = torch.from_numpy(sess.run(None, {proto.graph.input[0].name: x.numpy()})[0])
        torch.testing.assert_close(got, m(x).detach(), rtol=1e-4, atol=1e-5)


def test_pool_output_returned_directly_keeps_its_name():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2)).eval()
    proto = tracejit.export_onnx(_trace(m, torch.randn(1, 3, 16, 16)))
    assert _ops(proto)[-1] == ("MaxPool", 1)
    assert proto.graph.node[-1].output[0] == proto.graph.output[0].name
    x = torch.randn(3, 3, 21, 17)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    torch.testing.assert_close(torch.from_numpy(sess.run(None, {proto.graph.input[0].name: x.numpy()})[0]),
                               m(x).detach(), rtol=1e-4, atol=1e-5)


def test_read_indices_are_kept():
    m = nn.MaxPool2d(2, return_indices=True)
    proto = tracejit.export_onnx(_trace(m, torch.randn(1, 3, 8, 8)))
    assert ("MaxPool", 2) in _ops(proto)
    x = torch.randn(2, 3, 10, 6)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    values, indices = sess.run(None, {proto.graph.input[0].name: x.numpy()})
    ev, ei = m(x)
    torch.testing.assert_close(torch.from_numpy(values), ev)
    assert torch.equal(torch.from_numpy(indices), ei)


def test_onnxruntime_keeps_the_blocked_layout_across_the_pool(tmp_path):
    m = Stem().eval()
    optimized = tmp_path / "opt.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tracejit.optimize_for_inference(_trace(m, torch.randn(1, 3, 64, 64)), backend="onnxruntime",
                                                  optimized_model_path=optimized)
    x = torch.randn(1, 3, 64, 64)
    torch.testing.assert_close(program(x), m(x).detach(), rtol=1e-4, atol=1e-5)
    ops = [n.op_type for n in onnx.load(str(optimized)).graph.node]
    if "ReorderOutput" not in ops:
        pytest.skip("this onnxruntime build does not use the NCHWc layout (no AVX2/AVX-512)")
    assert "ReorderInput" not in ops[1:], ops   # reordered once at the entry (fused into the first conv)
    assert ops.count("ReorderOutput") == 1, ops


class HiddenAndUnusedPooler(nn.Module):
    """BERT's shape: a pooler computed on every call, its result not returned."""

    def __init__(self):
        super().__init__()
        self.layer, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)
        self.pooler = nn.Sequential(nn.Linear(8, 8), nn.Tanh())

    def forward(self, x):
        hidden = self.norm(x + self.layer(x))
        pooled = self.pooler(hidden[:, 0])   # noqa: F841  (computed, not returned)
        return hidden


def _unread(graph) -> list:
    """The op types of the nodes of ``graph`` (an onnx GraphProto) no output depends on."""
    producer = {o: n for n in graph.node for o in n.output}
    read, todo = set(), [o.name for o in graph.output]
    while todo:
        node = producer.get(todo.pop())
        if node is not None and id(node) not in read:
            read.add(id(node))
            todo.extend(node.input)
    return [n.op_type for n in graph.node if id(n) not in read]


def test_the_model_of_the_traced_sizes_drops_nodes_no_output_reads():
    """onnxruntime ran BERT's pooler, computed but not returned, as a FusedGemm on every call: the model whose
    input sizes are fixed (the one the onnxruntime backend runs at the traced sizes) drops the nodes no output
    reads; the exported file keeps them (at another size they may fail as eager's would), and the program gives
    eager's answer at the traced size and at others."""
    from tracejit.backends.onnxruntime import traced_sizes
    from tracejit.export.onnx_export import traced_graph
    from tracejit.export.static_shapes import with_input_sizes
    torch.manual_seed(0)
    m = HiddenAndUnusedPooler().eval()
    traced = _trace(m, torch.randn(2, 5, 8))
    exported = tracejit.export_onnx(traced)
    assert _unread(exported.graph) == ["Gather", "Gemm", "Tanh"]   # the pooler is in the file
    pinned = with_input_sizes(exported, traced_sizes(exported, traced_graph(traced)))
    assert _unread(pinned.graph) == [] and "LayerNormalization" in [n.op_type for n in pinned.graph.node]
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for shape in [(2, 5, 8), (3, 7, 8)]:
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), m(x).detach(), rtol=1e-5, atol=1e-5)


class PackedProjection(nn.Module):
    """torchvision's multi-head attention splitting its packed q / k / v projection."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 24)

    def forward(self, x):
        qkv = self.proj(x).unflatten(-1, (3, 8)).unsqueeze(0).transpose(0, -2).squeeze(-2)
        q, k, v = qkv[0], qkv[1], qkv[2]
        return (q.view(x.shape[0], -1, 2, 4) * k.view(x.shape[0], -1, 2, 4)).unsqueeze(1).squeeze(1) + v.reshape(
            x.shape[0], -1, 2, 4)


def _reshape_links(graph) -> list:
    """(op, op) of each reshape reading another reshape's output that nothing else reads."""
    from tracejit.export.reshape_chains import RESHAPES
    producer = {o: n for n in graph.node for o in n.output}
    readers = {}
    for n in graph.node:
        for name in n.input:
            readers[name] = readers.get(name, 0) + 1
    return [(producer[n.input[0]].op_type, n.op_type) for n in graph.node if n.op_type in RESHAPES
            and n.input[0] in producer and producer[n.input[0]].op_type in RESHAPES and readers[n.input[0]] == 1]


def test_the_model_of_the_traced_sizes_runs_each_chain_of_reshapes_as_one():
    """``Reshape -> Unsqueeze`` (unflatten, unsqueeze) and ``Unsqueeze -> Squeeze`` are one Reshape each in the
    model whose sizes are fixed (onnxruntime runs each link as a kernel); the exported file keeps them, and the
    program gives eager's answer at the traced size and at others."""
    from tracejit.backends.onnxruntime import traced_sizes
    from tracejit.export.onnx_export import traced_graph
    from tracejit.export.static_shapes import with_input_sizes
    torch.manual_seed(0)
    m = PackedProjection().eval()
    traced = _trace(m, torch.randn(2, 5, 8))
    exported = tracejit.export_onnx(traced)
    assert len(_reshape_links(exported.graph)) >= 2, _reshape_links(exported.graph)
    pinned = with_input_sizes(exported, traced_sizes(exported, traced_graph(traced)))
    assert _reshape_links(pinned.graph) == [], [n.op_type for n in pinned.graph.node]
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for shape in [(2, 5, 8), (3, 7, 8)]:
        x = torch.randn(shape)
        torch.testing.assert_close(program(x), m(x).detach(), rtol=1e-5, atol=1e-5)


class PaddedPool(nn.Module):
    """transformers' BiT stem: a conv, a zero ConstantPad2d, then max pooling over windows that may be all negative."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pad = nn.ConstantPad2d(1, 0.0)

    def forward(self, x):
        return nn.functional.max_pool2d(self.pad(self.conv(x) - 3.0), 3, 2)


@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"])
def test_a_zero_pad_before_max_pool_keeps_eagers_zeros_in_onnxruntime(level):
    """onnxruntime's PadFusion folds a zero Pad into the MaxPool after it, whose pads are -inf: each border window
    of negative values answered its largest value instead of 0 (export/tidy.keep_pads_out_of_max_pool)."""
    torch.manual_seed(0)
    m = PaddedPool().eval()
    traced = _trace(m, torch.randn(1, 3, 8, 8))
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    session = ort.InferenceSession(tracejit.export_onnx(traced).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    for x in (torch.randn(1, 3, 8, 8), torch.randn(2, 3, 13, 10)):
        with torch.no_grad():
            want = m(x)
        assert (want == 0).any()   # border windows the padding decides
        torch.testing.assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(program(x), want, rtol=1e-5, atol=1e-5)
