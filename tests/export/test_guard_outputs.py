"""Guards the exported model checks itself (export/guard_outputs.py, backends/guard_outputs.py).

``export_onnx(..., guard_outputs=True)`` turns each guard ONNX cannot check at the model's entry (a value read
in Python, the size of a tensor whose shape depends on the data) into a boolean output ``tracejit_guard_<k>``,
True where it holds, named with its source line in the metadata. In onnxruntime: eager's answer and True on
new inputs where the guard holds; False where eager takes the other branch (where torch.jit.trace's program,
which has no guards, silently gives the traced branch's answer). The onnxruntime / OpenVINO programs check the
outputs after each run; where one is False the traced program answers instead: eager's answer from a live one
(it traces again), the GuardError naming the line from one without its original. By default a value guard refuses
the export and a guard on a data-dependent size warns, both naming the option.
"""
from __future__ import annotations

import io
import warnings

import pytest
import torch

import tracejit
from tracejit.export.errors import ExportError

ort = pytest.importorskip("onnxruntime")


def positives_counted(x):
    kept = x[x > 0]                       # a boolean-mask index: its size follows the values
    if kept.shape[0] > 3:  # @positives_counted
        return kept.sum() * 2
    return kept.sum() - 1


def written_then_counted(x):
    buf = torch.zeros(x.shape[0] + 1)
    buf[: x.shape[0]].copy_(x)            # a write through a view (torchvision's batch_images pads so)
    kept = torch.where(buf > 0)[0]        # one-argument where (nonzero), which ATen tags no dynamic shape
    if kept.shape[0] > 3:  # @written_then_counted
        return x[kept].sum() * 2
    return x.sum() - 1


def sum_as_int(x):
    if int(x.sum()) > 0:  # @sum_as_int
        return x * 2
    return x - 1


def sign_of_max(x):
    if x.max() > 0.5:  # @sign_of_max
        return x.softmax(0)
    return x.tanh()


EXAMPLE = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
# fn, an input where the guard holds (other values; eager's answer moves), an input where eager branches otherwise
CASES = {
    "data-dependent size": (positives_counted, torch.tensor([7.0, -2.0, 0.5, 3.0, 1.5]),
                            torch.tensor([1.0, -2.0, -3.0, -4.0, 2.0])),
    # the backends computed this guard before the run from the program's slice that it reads, without the write:
    # a count of 0, a GuardError on the example itself (zoo Mask R-CNN's regions after nms, issue #25)
    "where(cond) after a write": (written_then_counted, torch.tensor([7.0, -2.0, 0.5, 3.0, 1.5]),
                                  torch.tensor([1.0, -2.0, -3.0, -4.0, 2.0])),
    "int(value)": (sum_as_int, torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0]), torch.tensor([-1.0, -2.0, -3.0, -4.0, 1.0])),
    "bool(value)": (sign_of_max, torch.tensor([0.7, -2.0, 0.1, 0.2, 0.0]), torch.tensor([0.1, -2.0, 0.3, 0.2, 0.0])),
}


def line_of(name: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if f"# @{name}" in text)


def _traced(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracejit.trace(fn, (EXAMPLE,), check_trace=False)


@pytest.mark.parametrize("case", list(CASES))
def test_guard_outputs_report_where_eager_takes_another_branch(case):
    fn, held, broken = CASES[case]
    traced = _traced(fn)
    proto = tracejit.export_onnx(traced, guard_outputs=True)
    names = [o.name for o in proto.graph.output]
    assert names == ["output", "tracejit_guard_0"]
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["tracejit.guard_outputs"].startswith("tracejit_guard_0: ")
    assert f"test_guard_outputs.py:{line_of(fn.__name__)}" in meta["tracejit.guard_outputs"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    assert not torch.equal(fn(held), fn(EXAMPLE)), "the new input moves eager's answer"
    out, ok = session.run(None, {"x": held.numpy()})
    torch.testing.assert_close(torch.from_numpy(out), fn(held))
    assert ok.dtype == bool and ok.shape == () and bool(ok)
    out, ok = session.run(None, {"x": broken.numpy()})
    assert not bool(ok)
    assert not torch.allclose(torch.from_numpy(out), fn(broken)), "the traced branch's answer is another one"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.trace(fn, (EXAMPLE,), check_trace=False)
    torch.testing.assert_close(reference(broken), torch.from_numpy(out))   # torch.jit: same answer, no flag


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
@pytest.mark.parametrize("case", list(CASES))
def test_backends_check_the_guard_outputs_and_the_traced_program_answers(case, backend):
    """A False guard output drops the run's answer (the traced branch's): the traced program answers, with eager's
    answer where it holds its original (it traces again) and the GuardError naming the line where it does not."""
    pytest.importorskip(backend)
    fn, held, broken = CASES[case]
    traced = _traced(fn)
    program = tracejit.optimize_for_inference(traced, backend=backend)
    torch.testing.assert_close(program(held), fn(held))
    torch.testing.assert_close(program(broken), fn(broken))
    traced.drop_original()
    program = tracejit.optimize_for_inference(traced, backend=backend)
    torch.testing.assert_close(program(broken), fn(broken))   # the retrace is one of the traced program's now
    gone = _traced(fn)
    gone.drop_original()
    program = tracejit.optimize_for_inference(gone, backend=backend)
    with pytest.raises(tracejit.GuardError, match=f"guard failed at \\S+test_guard_outputs.py:{line_of(fn.__name__)}"):
        program(broken)
    torch.testing.assert_close(program(held), fn(held))   # a failed call leaves the program usable


def reshaped_by_count(x):
    kept = x[x > 0]
    n = int((x > 0).sum())  # @reshaped_by_count
    return kept.reshape(n, 1) * 2


@pytest.fixture(params=[None, 1], ids=["threads-default", "threads-1"])
def threads(request):
    """torch's thread count while the program is built (the backends take theirs from it). At one inference thread
    OpenVINO's synchronous infer returned without computing where the traced Reshape no longer fit the data: the
    last call's answer came back as this call's, its guard outputs True (found running the suite with
    OMP_NUM_THREADS=1)."""
    before = torch.get_num_threads()
    if request.param is not None:
        torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("backend, options", [("onnxruntime", {}), ("openvino", {}),
                                              ("openvino", {"static_shapes": True})])
def test_where_the_traced_shapes_no_longer_fit_the_run_names_the_failed_guard(backend, options, threads):
    """With another count of positives the exported Reshape to the traced count cannot run: the backend computes
    the guard outputs alone and, one being False, the traced program answers: the GuardError naming the line where
    it holds no original (eager's answer where it does), not the runtime's error. Later calls where the guard
    holds are answered (OpenVINO kept the failed run's shapes in its compiled model: each later call failed until
    the model was compiled again)."""
    pytest.importorskip(backend)
    live = tracejit.optimize_for_inference(_traced(reshaped_by_count), backend=backend, **options)
    other = torch.tensor([3.0, -1.0, 4.0, 1.0, 5.0])
    torch.testing.assert_close(live(other), reshaped_by_count(other))
    traced = _traced(reshaped_by_count)
    traced.drop_original()
    program = tracejit.optimize_for_inference(traced, backend=backend, **options)
    held = torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0])
    torch.testing.assert_close(program(held), reshaped_by_count(held))
    with pytest.raises(tracejit.GuardError, match=f"guard failed at \\S+test_guard_outputs.py:"
                                                  f"{line_of('reshaped_by_count')}"):
        program(torch.tensor([3.0, -1.0, 4.0, 1.0, 5.0]))
    torch.testing.assert_close(program(held * 2), reshaped_by_count(held * 2))


def test_a_run_the_traced_program_answers_prints_nothing(capfd):
    """onnxruntime logged each failed run (and its optimizer's unused initializers) to stderr, in red, though the
    traced program answered the call: a server's log filled with errors of calls that succeeded."""
    pytest.importorskip("onnxruntime")
    program = tracejit.optimize_for_inference(_traced(reshaped_by_count), backend="onnxruntime")
    other = torch.tensor([3.0, -1.0, 4.0, 1.0, 5.0])   # another count: the traced Reshape cannot run
    torch.testing.assert_close(program(other), reshaped_by_count(other))
    assert "onnxruntime" not in capfd.readouterr().err


def test_the_default_export_refuses_a_value_guard_and_checks_a_data_dependent_size_in_the_graph():
    with pytest.raises(ExportError, match=r"tensor values \(int\(tensor\) in `.*guard_outputs=True.*"
                                          r"a caller must check them") as info:
        tracejit.export_onnx(_traced(sum_as_int))
    assert f"test_guard_outputs.py:{line_of('sum_as_int')}" in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracejit.TracerWarning)
        proto = tracejit.export_onnx(_traced(positives_counted))
    assert [o.name for o in proto.graph.output] == ["output"]
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    held = torch.tensor([3.0, -1.0, 4.0, 1.0, 5.0])   # 4 positives > 3: the traced branch is eager's
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"x": held.numpy()})[0]), positives_counted(held))
    with pytest.raises(Exception, match=rf"tracejit_guard_0_failed_at_\S*test_guard_outputs.py:"
                                        rf"{line_of('positives_counted')}"):
        session.run(None, {"x": -held.numpy()})   # no positive: before, the traced branch's answer


def test_the_cli_exports_guard_outputs(tmp_path, capsys):
    from tracejit import cli
    saved = tmp_path / "f.tjit"
    tracejit.save(_traced(sum_as_int), str(saved))
    argv = ["export", str(saved), "-o", str(tmp_path / "f.onnx")]
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert refused.value.code == 2 and "--guard-outputs" in capsys.readouterr().err
    assert cli.main(argv + ["--guard-outputs"]) == 0
    out = capsys.readouterr().out
    assert "tracejit_guard_0: int(tensor)" in out and f"test_guard_outputs.py:{line_of('sum_as_int')}" in out
    session = ort.InferenceSession(str(tmp_path / "f.onnx"), providers=["CPUExecutionProvider"])
    assert [bool(session.run(None, {"x": x.numpy()})[1]) for x in CASES["int(value)"][1:]] == [True, False]


def test_guard_outputs_survive_a_saved_and_loaded_program():
    buffer = io.BytesIO()
    tracejit.save(_traced(positives_counted), buffer)
    loaded = tracejit.load(io.BytesIO(buffer.getvalue()))
    program = tracejit.optimize_for_inference(loaded, backend="onnxruntime")
    fn, held, broken = CASES["data-dependent size"]
    torch.testing.assert_close(program(held), fn(held))
    with pytest.raises(tracejit.GuardError, match=f"test_guard_outputs.py:{line_of('positives_counted')}"):
        program(broken)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_guard_output_only_the_runtime_fails_is_answered_by_the_traced_program(backend, monkeypatch):
    """The runtime's values can flip a guard that holds in torch: onnxruntime's Mask R-CNN boxes, off torch's by
    fp32 reassociation, moved one truncated ``int(box[2] - box[0] + 1)`` of 96 (issue #25; the zoo's Mask R-CNN at
    batch 8 raised GuardError on its own example). A False guard output hands the call to the traced program,
    whose guards torch computes: eager's answer, no GuardError, no new trace, even without the original."""
    pytest.importorskip(backend)
    from tracejit.backends.guard_outputs import GuardOutputs
    fn, held, _ = CASES["int(value)"]
    traced = _traced(fn)
    traced.drop_original()
    program = tracejit.optimize_for_inference(traced, backend=backend)
    answered = []

    def safe(*args, **kwargs):
        answered.append(args)
        return traced(*args, **kwargs)
    monkeypatch.setattr(program, "_safe", safe)
    torch.testing.assert_close(program(held), fn(held))
    assert not answered   # the runtime's guard output held: its answer
    monkeypatch.setattr(GuardOutputs, "hold", lambda self, outs, alone=False: False)   # as if its value flipped
    for x in (held, held.flip(0)):   # int(x.sum()) as traced (15): the guard holds in torch
        torch.testing.assert_close(program(x), fn(x))
    assert len(answered) == 2 and len(traced.specializations) == 1
