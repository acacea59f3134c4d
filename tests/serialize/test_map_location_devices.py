"""``load(map_location=...)`` moves what a program recorded about devices with its tensors
(serialize/relocate.py): code that read a tensor's device in Python (transformers' T5 and DeBERTa build
masks on ``input_ids.device``) was guarded on the traced device, so a program saved on a GPU and loaded onto
the CPU raised GuardError on CPU inputs (found on a GPU machine). The meta device stands for the other one."""
from __future__ import annotations

import io

import pytest
import torch

import tracejit
from tracejit.passes.pipeline import program_device


def _reads_its_device(x):
    device = x.device
    if device is None:   # a Python read of the device: a device guard
        raise AssertionError
    return x * 2 + torch.arange(x.shape[-1], device=device)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return _reads_its_device(self.lin(x))


def _saved(program) -> io.BytesIO:
    buf = io.BytesIO()
    tracejit.save(program, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("make", [lambda: _reads_its_device, Net])
def test_a_device_read_follows_map_location(make):
    fn = make()
    traced = tracejit.trace(fn, (torch.randn(2, 4),))
    assert "device" in {n.attrs.get("kind") for _, _, g in traced.program.graphs() for n in g.nodes}
    if not isinstance(fn, torch.nn.Module):   # (a module's CPU weights refuse meta inputs first)
        with pytest.raises(tracejit.GuardError, match="device"):   # not moved: the traced device is expected
            tracejit.load(_saved(traced))(torch.randn(3, 4, device="meta"))
    on_meta = tracejit.load(_saved(traced), map_location="meta")
    out = on_meta(torch.randn(3, 4, device="meta"))
    assert out.device.type == "meta" and out.shape == (3, 4)
    assert program_device(on_meta) == "meta"
    # a meta program's weights hold no data to save: a module goes back from the CPU file
    back = tracejit.load(_saved(traced if isinstance(fn, torch.nn.Module) else on_meta), map_location="cpu")
    x = torch.randn(5, 4)
    torch.testing.assert_close(back(x), fn(x))
    assert program_device(back) == "cpu"


# ------------------------------------------------------------------ load without map_location: the saved devices
def _net_file_naming(device_text):
    """A saved CPU Net whose document says its weight was saved on ``device_text`` (what a GPU save writes)."""
    from filesurgery import rewrite
    torch.manual_seed(0)
    net = Net().eval()
    raw = _saved(tracejit.trace(net, (torch.randn(2, 4),))).getvalue()

    def edit(doc):
        assert "tensor_devices" not in doc["program"]   # an all-CPU program writes no device table
        doc["program"]["tensor_devices"] = {"lin.weight": device_text}
    return net, rewrite(raw, edit)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CUDA machine loads it there: tests/device/test_cuda_paths.py")
def test_a_file_saved_on_cuda_needs_map_location_where_cuda_is_missing():
    net, raw = _net_file_naming("cuda:0")
    with pytest.raises(tracejit.LoadError, match=r"saved with tensors on cuda:0.*no CUDA device.*map_location='cpu'"):
        tracejit.load(io.BytesIO(raw))
    loaded = tracejit.load(io.BytesIO(raw), map_location="cpu")   # as torch.jit.load: map_location puts it here
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x), net(x))


@pytest.mark.parametrize("text", ["mps", "cpu", "cuda:1; rm -rf", "cuda:99999", "", 7])
def test_a_file_names_only_cuda_devices(text):
    _, raw = _net_file_naming(text)
    for where in (None, "cpu"):
        with pytest.raises(tracejit.LoadError, match="names the device .*a file records only 'cuda' or 'cuda:N'"):
            tracejit.load(io.BytesIO(raw), map_location=where)


def test_a_malformed_device_table_is_a_load_error():
    from filesurgery import rewrite
    raw = _saved(tracejit.trace(Net(), (torch.randn(2, 4),))).getvalue()
    bad = rewrite(raw, lambda doc: doc["program"].__setitem__("tensor_devices", ["lin.weight", "cuda:0"]))
    for where in (None, "cpu"):
        with pytest.raises(tracejit.LoadError, match="tensor_devices table is malformed"):
            tracejit.load(io.BytesIO(bad), map_location=where)
