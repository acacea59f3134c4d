"""An eval-mode BatchNorm after a conv is folded into the conv's weight and bias in the exported file
(export/batch_norm_folding.py), in float64, as torch.onnx's exporter folds it: the file has no
BatchNormalization, onnxruntime's answer on new sizes is eager's, and its distance to eager in float64 is no
worse than torch.onnx's file's. A norm whose conv output is read elsewhere too stays."""
import io
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import tracejit

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _randomised(model):
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.running_mean.copy_(torch.rand(n, generator=gen) * 2 - 1)
                m.running_var.copy_(torch.rand(n, generator=gen) * 3 + 0.1)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.rand(n, generator=gen) - 0.5)
    return model.eval()


def _net():
    torch.manual_seed(0)
    return _randomised(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                     nn.Conv2d(8, 8, 3, groups=4, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                     nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4)))


def _export(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.export_onnx(tracejit.trace(model, x))


def _run(model_bytes, x):
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    return torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])


def test_norms_after_convs_are_folded_and_answer_as_eager_on_new_sizes():
    model = _net()
    proto = _export(model, torch.randn(1, 3, 16, 16))
    ops = [n.op_type for n in proto.graph.node]
    assert "BatchNormalization" not in ops and ops.count("Conv") == 3, ops
    assert not any("running_mean" in i.name for i in proto.graph.initializer)
    x = torch.randn(2, 3, 21, 13)
    torch.testing.assert_close(_run(proto.SerializeToString(), x), model(x).detach(), rtol=1e-4, atol=1e-5)


def test_folded_file_is_as_close_to_float64_as_torch_onnx_file():
    model = _net()
    x = torch.randn(1, 3, 16, 16)
    ours = _export(model, x).SerializeToString()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "b", 2: "h", 3: "w"}})
    reference = _net().double()
    errors = {"ours": [], "torch.onnx": []}
    for seed in range(4):
        new = torch.randn(3, 3, 24, 20, generator=torch.Generator().manual_seed(seed))
        want = reference(new.double()).detach()
        for name, model_bytes in (("ours", ours), ("torch.onnx", f.getvalue())):
            errors[name].append(float((_run(model_bytes, new).double() - want).abs().max()))
    assert max(errors["ours"]) <= 1.5 * max(errors["torch.onnx"]), errors


def test_folded_weights_are_the_float64_folding_rounded_once():
    model = _net()
    proto = _export(model, torch.randn(1, 3, 8, 8))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    conv, norm = model[0], model[1]
    scale = norm.weight.double() / torch.sqrt(norm.running_var.double() + norm.eps)
    weight = (conv.weight.double() * scale[:, None, None, None]).float().detach().numpy()
    bias = ((conv.bias.double() - norm.running_mean.double()) * scale + norm.bias.double()).float().detach().numpy()
    first = next(n for n in proto.graph.node if n.op_type == "Conv")
    assert np.array_equal(inits[first.input[1]], weight) and np.array_equal(inits[first.input[2]], bias)


class ConvReadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.norm(y) + y


def test_a_norm_whose_conv_output_is_read_elsewhere_stays():
    model = _randomised(ConvReadTwice())
    proto = _export(model, torch.randn(1, 3, 8, 8))
    assert "BatchNormalization" in [n.op_type for n in proto.graph.node]
    x = torch.randn(2, 3, 9, 12)
    torch.testing.assert_close(_run(proto.SerializeToString(), x), model(x).detach(), rtol=1e-4, atol=1e-5)
