"""A model written with einops (``rearrange``, ``repeat``, the ``Rearrange`` layer), as many research models are.

einops computes each reshape's sizes once per input shape (``functools.lru_cache`` keyed by the shape) and fills a
module-level table of backends on its first call. Before session 19, every einops model failed tracejit.trace's
default check ("Graphs differed across invocations": the checker's retrace hit the cache the trace had missed).
Now the hashed sizes are guarded and pinned (trace/number_escapes.py): the trace, another image size (a retrace
at einops' line), the saved file, the optimized and the onnxruntime programs all give eager's answer; a loaded
program on a size no specialization holds raises GuardError naming einops' line.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import tracejit

from zoo_check import needs_onnx

einops = pytest.importorskip("einops", reason="make test installs einops (the test extras)")
from einops import rearrange, repeat  # noqa: E402
from einops.layers.torch import Rearrange  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")]


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in self.qkv(x).chunk(3, dim=-1))
        attn = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(-1)
        return self.out(rearrange(attn @ v, "b h n d -> b n (h d)"))


class EinopsViT(nn.Module):
    def __init__(self, patch=4, dim=32, heads=4, classes=10):
        super().__init__()
        self.patches = nn.Sequential(Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
                                     nn.Linear(patch * patch * 3, dim))
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.attention, self.head = Attention(dim, heads), nn.Linear(dim, classes)

    def forward(self, image):
        x = self.patches(image)
        x = torch.cat((repeat(self.cls, "1 1 d -> b 1 d", b=x.shape[0]), x), dim=1)
        x = x + self.attention(x)
        return self.head(x[:, 0])


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _forget_einops_caches():
    """As in a fresh process: einops' per-shape caches empty (the trace is the first call on these sizes)."""
    for name in ("_reconstruct_from_shape", "_prepare_transformation_recipe"):
        cached = getattr(einops.einops, name, None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


def test_einops_vit_traces_with_the_default_check_and_follows_new_sizes(tmp_path):
    torch.manual_seed(0)
    model = EinopsViT().eval()
    example, other = torch.randn(2, 3, 16, 16), torch.randn(3, 3, 24, 24)   # another batch and image size
    _forget_einops_caches()
    traced = tracejit.trace(model, example)   # check_trace=True; the first einops call of the process's test
    assert not torch.allclose(model(other[:2, :, :16, :16]), model(example))  # the inputs move the output
    _close(traced(example), model(example))
    _close(traced(other), model(other))                                      # retraced at einops' line
    traced.save(tmp_path / "vit.pt")
    loaded = tracejit.load(tmp_path / "vit.pt")
    _close(loaded(other), model(other))                                      # the file holds both sizes
    with pytest.raises(tracejit.GuardError, match="einops"):
        loaded(torch.randn(1, 3, 32, 32))
    _close(tracejit.optimize_for_inference(traced)(other), model(other))


@needs_onnx
def test_einops_vit_in_onnxruntime_on_both_sizes():
    model = EinopsViT().eval()
    example, other = torch.randn(2, 3, 16, 16), torch.randn(3, 3, 24, 24)
    _forget_einops_caches()
    traced = tracejit.trace(model, example)
    traced(other)   # a second specialization, as a server meets it
    program = tracejit.optimize_for_inference(traced, backend="onnxruntime")
    _close(program(example), model(example))
    _close(program(other), model(other))
