"""``tracejit export`` and ``tracejit view --netron`` export the file's Program (issue #24, item 1): they read it
with ``serialize.read_program`` and hand it to ``export_onnx``, never building the runtime objects
``tracejit.load`` compiles. The runtime's builders are patched to fail here; the models the verbs write are
the ones ``tracejit.export_onnx(tracejit.load(f))`` (the Python API, which turns the object into its Program)
gives, and they run like eager on a new batch size (onnxruntime)."""
from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

import tracejit
from tracejit import cli
from tracejit.runtime import assemble, method_compiler, specialize
from tracejit.runtime.traced import TracedFunction, TracedModule
from tracejit.serialize import loader, read_program

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Net(nn.Module):
    """A submodule shared at two paths and a buffer: the exporter reads tensors from the Program's entries."""

    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = self.a
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        return self.b(self.a(x)) * self.scale + x.sum(-1, keepdim=True)


def _no_runtime_objects(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the command built a runtime object")
    for owner, attr in [(assemble, "compile_loaded"), (assemble, "compile_program"), (assemble, "module_tree"),
                        (loader, "compile_loaded"), (method_compiler, "compile_method"),
                        (TracedModule, "__init__"), (TracedFunction, "__init__"),
                        (specialize, "enable_for_module"), (specialize, "enable_for_function")]:
        monkeypatch.setattr(owner, attr, boom)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = Net().eval()
    path = str(tmp_path_factory.mktemp("export_program") / "net.tjit")
    with torch.no_grad():
        tracejit.save(tracejit.trace(model, torch.randn(2, 4)), path)
    return model, path


def _session_run(model_proto, x):
    session = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


@pytest.mark.parametrize("verb", ["export", "view --netron"])
def test_the_verbs_export_the_files_program_without_runtime_objects(saved, tmp_path, monkeypatch, capsys, verb):
    model, path = saved
    doc_strings = verb != "export"
    expected = tracejit.export_onnx(tracejit.load(path), doc_strings=doc_strings)   # the Python API, an object
    _no_runtime_objects(monkeypatch)
    with pytest.raises(AssertionError, match="built a runtime object"):
        tracejit.load(path)   # the patch holds
    out = str(tmp_path / "net.onnx")
    assert cli.main([*verb.split(), path, "-o", out]) == 0
    capsys.readouterr()
    written = onnx.load(out)
    assert written.SerializeToString() == expected.SerializeToString()
    if doc_strings:
        assert written.doc_string.startswith("exported by tracejit from TracedModule Net")
    x = torch.randn(5, 4)   # another batch size than the trace's 2
    with torch.no_grad():
        want = model(x)
    assert not torch.allclose(want, model(torch.randn(5, 4)))   # the input moves the output
    torch.testing.assert_close(_session_run(written, x), want, rtol=1e-5, atol=1e-5)


def test_export_onnx_takes_a_program_and_an_object_alike(saved):
    _, path = saved
    program = read_program(path)
    from_program = tracejit.export_onnx(program, doc_strings=True)
    from_object = tracejit.export_onnx(tracejit.load(path), doc_strings=True)
    assert from_program.SerializeToString() == from_object.SerializeToString()
    with pytest.raises(TypeError, match="traced module or function"):
        tracejit.export_onnx(nn.Linear(2, 2))
