"""A submodule whose inputs or outputs tracejit cannot flatten (torchvision's ImageList) is traced
through in place, as torch.jit.trace does, instead of refusing the whole model (issue #25 item 5).

Unlike torch.jit.trace, the sizes the object carries stay traced: on another image size the program
gives eager's answer (or a GuardError where a branch read them), live and after save + load."""
from __future__ import annotations

import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.errors import GuardError, TraceError


class ImageList:
    """torchvision.models.detection.image_list.ImageList, as plain Python: a batch and its sizes."""

    def __init__(self, tensors, image_sizes):
        self.tensors, self.image_sizes = tensors, image_sizes


class Transform(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, images):
        sizes = [tuple(im.shape[-2:]) for im in images]
        return ImageList(torch.stack(images) * self.scale, sizes)


class Head(nn.Module):
    def __init__(self, branch: bool):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.branch = branch

    def forward(self, images: ImageList, features):
        h, w = images.image_sizes[0]
        out = self.lin(features.mean((-1, -2))) * (h * w)
        if self.branch and h > 6:       # a branch on a size the object carries: guarded
            out = out - 100
        return out


class Detector(nn.Module):
    def __init__(self, branch: bool = False):
        super().__init__()
        self.transform = Transform()
        self.conv = nn.Conv2d(3, 3, 1)
        self.head = Head(branch)

    def forward(self, images):
        batch = self.transform(images)
        return self.head(batch, self.conv(batch.tensors).relu())


def _images(h, w, n=2):
    return [torch.randn(3, h, w) for _ in range(n)]


def _load(traced):
    buf = io.BytesIO()
    traced.save(buf)
    buf.seek(0)
    return tracejit.load(buf)


def test_an_image_list_between_submodules_is_traced_through_and_follows_new_sizes():
    model = Detector().eval()
    traced = tracejit.trace(model, (_images(8, 8),))
    new = _images(5, 7)
    assert not torch.allclose(model(new), model(_images(8, 8))), "the image size must move the answer"
    loaded = _load(traced)
    for program in (traced, loaded):
        torch.testing.assert_close(program(new), model(new))
    # the hierarchy is kept for every call tracejit can flatten
    paths = {n.attrs["path"] for n in traced.graph.nodes if n.op == "tracejit::call_module"}
    assert paths == {"conv", "head.lin"}
    assert "self._modules['transform']._parameters['scale']" in traced.code   # the spliced callee's parameter


def test_torch_jit_trace_freezes_a_branch_on_a_carried_size_where_tracejit_retraces():
    model = Detector(branch=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.trace(model, (_images(8, 8),), check_trace=False)
        ours = tracejit.trace(model, (_images(8, 8),))
        new = _images(5, 7)
        assert not torch.allclose(reference(new), model(new))   # torch.jit: the h > 6 branch frozen
        torch.testing.assert_close(ours(new), model(new))
        plain = _images(9, 10)                                   # same branch: both follow the sizes
        torch.testing.assert_close(reference(plain), model(plain))
        torch.testing.assert_close(ours(plain), model(plain))


def test_a_branch_on_a_carried_size_is_guarded():
    model = Detector(branch=True).eval()
    traced = tracejit.trace(model, (_images(8, 8),))
    small = _images(5, 7)
    with pytest.warns(tracejit.TracerWarning, match="guard failed"):
        torch.testing.assert_close(traced(small), model(small))   # retraced for the other branch
    loaded = _load(tracejit.trace(model, (_images(8, 8),)))
    with pytest.raises(GuardError, match="test_traced_through.py"):
        loaded(small)
    big = _images(9, 7)
    torch.testing.assert_close(loaded(big), model(big))


def test_gradients_flow_through_the_spliced_submodule():
    model = Detector().eval()
    traced = tracejit.trace(model, (_images(8, 8),))
    new = _images(6, 4)
    traced(new).sum().backward()
    got = model.transform.scale.grad.clone()
    model.zero_grad()
    model(new).sum().backward()
    torch.testing.assert_close(got, model.transform.scale.grad)


class ReturnsImageList(nn.Module):
    def forward(self, x):
        return ImageList(x * 2, [tuple(x.shape)])


def test_the_traced_module_itself_returning_an_object_is_still_refused():
    with pytest.raises(TraceError, match="ImageList"):
        tracejit.trace(ReturnsImageList(), torch.randn(2, 3))
