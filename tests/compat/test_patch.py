"""tracejit.patch_torch_jit(): torch.jit's entry points routed to tracejit, nested, and undone."""
import io
import threading
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit import patch as patch_module

ORIGINALS = {name: getattr(torch.jit, name) for name in ("trace", "trace_module", "save", "load")}


@pytest.fixture(autouse=True)
def _always_unpatched():
    yield
    while patch_module.is_patched():
        tracejit.unpatch_torch_jit()
    assert {name: getattr(torch.jit, name) for name in ORIGINALS} == ORIGINALS


class Lib(nn.Module):
    """Stands for a library that calls torch.jit.trace inside its own code."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x).relu()

    def export(self):
        return torch.jit.trace(self, torch.randn(2, 3))


def test_context_manager_routes_trace_and_undoes():
    m = Lib()
    with tracejit.patch_torch_jit():
        traced = m.export()
        assert isinstance(traced, tracejit.TracedModule)
        tm = torch.jit.trace_module(m, {"forward": torch.randn(2, 3)})
        assert isinstance(tm, tracejit.TracedModule)
    x = torch.randn(4, 3)
    torch.testing.assert_close(traced(x), m(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not isinstance(m.export(), tracejit.TracedModule)


def test_call_form_and_nesting():
    tracejit.patch_torch_jit()
    with tracejit.patch_torch_jit():
        assert torch.jit.trace is tracejit.trace
    assert torch.jit.trace is tracejit.trace          # the outer patch still holds
    tracejit.unpatch_torch_jit()
    assert torch.jit.trace is ORIGINALS["trace"]
    with pytest.raises(RuntimeError, match="not patched"):
        tracejit.unpatch_torch_jit()


def test_undo_is_idempotent_per_handle():
    handle = tracejit.patch_torch_jit()
    handle.undo()
    handle.undo()
    assert torch.jit.trace is ORIGINALS["trace"] and not patch_module.is_patched()


def test_undo_leaves_someone_else_s_replacement():
    mine = lambda *a, **k: None  # noqa: E731
    with tracejit.patch_torch_jit():
        torch.jit.trace = mine
    try:
        assert torch.jit.trace is mine
    finally:
        torch.jit.trace = ORIGINALS["trace"]


def test_save_and_load_route_by_kind():
    m = Lib()
    x = torch.randn(4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted_buf = io.BytesIO()
        torch.jit.save(torch.jit.trace(m, x), scripted_buf)          # a TorchScript zip, before patching
    with tracejit.patch_torch_jit():
        traced = torch.jit.trace(m, x)
        buf = io.BytesIO()
        torch.jit.save(traced, buf, _extra_files={"k": "v"})
        buf.seek(0)
        extra = {"k": ""}
        loaded = torch.jit.load(buf, _extra_files=extra)
        assert isinstance(loaded, tracejit.TracedModule) and extra == {"k": b"v"}
        torch.testing.assert_close(loaded(x), m(x))
        scripted_buf.seek(0)
        ts = torch.jit.load(scripted_buf)                               # TorchScript goes to torch's load
        assert isinstance(ts, torch.jit.ScriptModule)
        torch.testing.assert_close(ts(x), m(x))


def test_patch_from_threads_is_balanced():
    def work():
        for _ in range(20):
            with tracejit.patch_torch_jit():
                assert torch.jit.trace is tracejit.trace
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not patch_module.is_patched()


def test_load_of_a_missing_path_raises_torch_s_error(tmp_path):
    missing = str(tmp_path / "missing.pt")
    with pytest.raises(Exception) as ref:
        torch.jit.load(missing)
    with tracejit.patch_torch_jit():
        with pytest.raises(type(ref.value)):
            torch.jit.load(missing)
