"""``tracejit export`` (tracejit/cli/export.py), run in-process through ``tracejit.cli.main``: saved
programs exported to ONNX run in onnxruntime on NEW batch sizes with eager's (and torch.jit.trace's)
answers; the summary names the dynamic axes and the guards; bad files and unconvertible ops exit 2."""
from __future__ import annotations

import os
import re
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit import cli

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)).eval()


class FlattenHead(nn.Module):
    """Reads the batch size in Python (``x.size(0)``): a symbolic batch the ONNX model keeps."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * 5 * 5, 6)

    def forward(self, x):
        h = self.conv(x).relu()
        return self.head(h.view(h.size(0), -1))


def save(model, example, path):
    with torch.no_grad():
        traced = tracejit.trace(model, example)
    tracejit.save(traced, str(path))
    return str(path)


def run_cli(capsys, *argv):
    """(exit status, stdout, stderr) of ``tracejit ARGV``."""
    try:
        code = cli.main(list(argv))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def ort_run(path, *inputs):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(o) for o in session.run(None, feed)]


def jit_trace(model, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(model, example, check_trace=False)


def test_export_a_saved_mlp_runs_in_onnxruntime_on_a_new_batch_size(tmp_path, capsys):
    model = mlp()
    path = save(model, torch.randn(2, 16), tmp_path / "mlp.tjit")
    out = str(tmp_path / "mlp.onnx")
    code, stdout, stderr = run_cli(capsys, "export", path, "-o", out)
    assert code == 0, stderr
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    assert f"{out}: ONNX opset 18, {len(proto.graph.node)} nodes," in stdout
    assert "  input: float32[input_dim0, input_dim1]  (dynamic axes input_dim0, input_dim1)" in stdout
    assert "  output: float32[input_dim0, 4]" in stdout
    assert stderr == ""
    jit = jit_trace(model, torch.randn(2, 16))
    for batch in (1, 7):
        x = torch.randn(batch, 16)
        with torch.no_grad():
            expected = model(x)
            torch.testing.assert_close(jit(x), expected)
        (got,) = ort_run(out, x)
        assert got.shape == (batch, 4)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    with torch.no_grad():   # the input moves the output: the comparison above can fail
        assert not torch.allclose(model(x), model(x + 1))


def test_export_keeps_a_batch_size_read_in_python_symbolic(tmp_path, capsys):
    model = FlattenHead().eval()
    example = torch.randn(2, 3, 5, 5)
    path = save(model, example, tmp_path / "head.tjit")
    out = str(tmp_path / "head.onnx")
    code, stdout, stderr = run_cli(capsys, "export", path, "-o", out)
    assert code == 0, stderr
    assert "  x: float32[x_dim0, x_dim1, x_dim2, x_dim3]" in stdout
    assert re.search(r"^  output: float32\[\w+, 6\]$", stdout, re.M), stdout   # dim 0: a dynamic axis
    jit = jit_trace(model, example)
    for batch in (5, 1):
        x = torch.randn(batch, 3, 5, 5)
        with torch.no_grad():
            expected = model(x)
            assert jit(x).shape == expected.shape   # torch.jit.trace also keeps view(x.size(0), -1) symbolic
            torch.testing.assert_close(jit(x), expected)
        (got,) = ort_run(out, x)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def guarded(x):
    y = x * 2 if x.size(1) == 4 else x
    return y.flatten(1) if x.size(0) > 1 else y   # GUARD LINE


def test_summary_names_a_pinned_dim_and_the_guards_the_model_checks(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        path = save(guarded, (torch.randn(3, 4, 5),), tmp_path / "g.tjit")
    out = str(tmp_path / "g.onnx")
    code, stdout, stderr = run_cli(capsys, "export", path, "-o", out)
    assert code == 0, stderr
    line = guarded.__code__.co_firstlineno + 2
    pin = f"{guarded.__code__.co_filename}:{guarded.__code__.co_firstlineno + 1}"
    assert "  x: float32[x_dim0, 4, x_dim2]  (dynamic axes x_dim0, x_dim2; dim 1 static: pinned by the guard at " \
           f"{os.path.relpath(pin) if pin.startswith(os.getcwd()) else pin})" in stdout
    assert "guards the model checks itself" in stdout
    assert f"a traced size was used in 'gt' with 1 (" in stdout and f"test_export_cli.py:{line})" in stdout
    assert "TracerWarning" not in stderr   # the warning is the summary's note, not a traceback-like line
    x = torch.randn(6, 4, 2)
    (got,) = ort_run(out, x)
    torch.testing.assert_close(got, guarded(x))
    with pytest.raises(Exception, match=rf"tracejit_guard_0_failed_at_\S*test_export_cli.py:{line}"):
        ort_run(out, torch.randn(1, 4, 2))   # eager returns y unflattened: the model refuses, naming the line


def test_a_damaged_or_missing_file_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.tjit"
    bad.write_bytes(b"hello")
    code, stdout, stderr = run_cli(capsys, "export", str(bad), "-o", str(tmp_path / "b.onnx"))
    assert code == 2
    assert stderr == f"tracejit: error: {bad}: cannot load: the file is 5 bytes long: too short to be a tracejit " \
                     "program\n"
    assert not (tmp_path / "b.onnx").exists()
    code, _, stderr = run_cli(capsys, "export", str(tmp_path / "none.tjit"), "-o", str(tmp_path / "b.onnx"))
    assert code == 2 and stderr == f"tracejit: error: {tmp_path / 'none.tjit'}: no such file\n"


def zeta(x):
    return torch.special.zeta(x, 2.0) + 1   # ZETA LINE


def test_an_op_without_conversion_exits_2_naming_the_op_and_line(tmp_path, capsys):
    path = save(zeta, (torch.rand(3) + 1.5,), tmp_path / "zeta.tjit")
    code, stdout, stderr = run_cli(capsys, "export", path, "-o", str(tmp_path / "z.onnx"))
    assert code == 2
    assert stderr.startswith(f"tracejit: error: {path}: cannot export to ONNX: ")
    assert "aten::special_zeta" in stderr
    assert f"test_export_cli.py:{zeta.__code__.co_firstlineno + 1})" in stderr
    assert stderr.count("\n") == 1 and stdout == ""
    assert not (tmp_path / "z.onnx").exists()


def test_opset_option_and_usage_errors(tmp_path, capsys):
    path = save(mlp(), torch.randn(2, 16), tmp_path / "mlp.tjit")
    out = str(tmp_path / "m19.onnx")
    code, stdout, stderr = run_cli(capsys, "export", path, "-o", out, "--opset", "19")
    assert code == 0, stderr
    assert "ONNX opset 19" in stdout
    assert [o.version for o in onnx.load(out).opset_import if o.domain in ("", "ai.onnx")] == [19]
    code, _, stderr = run_cli(capsys, "export", path, "-o", out, "--opset", "12")
    assert code == 2 and "opset 12 is not supported; use 18 or later" in stderr
    code, _, stderr = run_cli(capsys, "export", path)
    assert code == 2 and stderr == "tracejit: error: export needs -o FILE.onnx, --triton DIR, or both\n"
    code, _, stderr = run_cli(capsys, "export", path, "-o", out, "--name", "x")
    assert code == 2 and "--name and --max-batch-size go with --triton DIR" in stderr


def test_triton_repository_from_the_command_line(tmp_path, capsys):
    model = mlp()
    path = save(model, torch.randn(2, 16), tmp_path / "mlp.tjit")
    repo = tmp_path / "repo"
    code, stdout, stderr = run_cli(capsys, "export", path, "--triton", str(repo), "--name", "my mlp/v2",
                                   "--max-batch-size", "8")
    assert code == 0, stderr
    assert sorted(os.listdir(repo)) == ["my_mlp_v2"]
    assert sorted(os.listdir(repo / "my_mlp_v2")) == ["1", "config.pbtxt"]
    assert os.listdir(repo / "my_mlp_v2" / "1") == ["model.onnx"]
    text = (repo / "my_mlp_v2" / "config.pbtxt").read_text()
    assert 'name: "my_mlp_v2"' in text and "max_batch_size: 8" in text and "dynamic_batching { }" in text
    assert "(max_batch_size 8, dynamic batching); serve with `tritonserver --model-repository" in stdout
    x = torch.randn(3, 16)
    (got,) = ort_run(str(repo / "my_mlp_v2" / "1" / "model.onnx"), x)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)


def test_max_batch_size_on_a_program_without_a_batch_axis_exits_2(tmp_path, capsys):
    def project(x, w):
        return x @ w
    path = save(project, (torch.randn(2, 3), torch.randn(3, 5)), tmp_path / "p.tjit")
    code, _, stderr = run_cli(capsys, "export", path, "--triton", str(tmp_path / "r"), "--max-batch-size", "4")
    assert code == 2
    assert "max_batch_size=4 needs a batch axis" in stderr
    code, stdout, stderr = run_cli(capsys, "export", path, "--triton", str(tmp_path / "r"))
    assert code == 0, stderr
    assert "max_batch_size 0 (full shapes, no batching)" in stdout


class TwoMethods(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.lin = nn.Linear(5, 2)

    def forward(self, x):
        return self.lin(x)

    def score(self, weight):
        return (weight * self.lin.weight).sum(1)


def test_method_option_exports_another_traced_method(tmp_path, capsys):
    model = TwoMethods().eval()
    with torch.no_grad():
        traced = tracejit.trace_module(model, {"forward": torch.randn(3, 5), "score": torch.randn(2, 5)})
    path = str(tmp_path / "two.tjit")
    tracejit.save(traced, path)
    out = str(tmp_path / "score.onnx")
    code, stdout, stderr = run_cli(capsys, "export", path, "-o", out, "--method", "score")
    assert code == 0, stderr
    assert "  weight: float32[weight_dim0, weight_dim1]" in stdout and "method score" in stdout
    w = torch.randn(2, 5)
    (got,) = ort_run(out, w)
    with torch.no_grad():
        torch.testing.assert_close(got, model.score(w), rtol=1e-4, atol=1e-5)
    code, _, stderr = run_cli(capsys, "export", path, "-o", out, "--method", "nope")
    assert code == 2 and "without a traced 'nope'" in stderr
