"""torch's global module hooks (register_module_forward_hook and kin) against traced programs: eager runs the
ones registered at each call; a traced program answers eager's answer or raises, never runs a stale set
(trace/global_hooks.py, runtime/late_hooks.check_global). torch.jit's traced modules are silently wrong on each."""
import io
import warnings

import pytest
import torch
from torch import nn

import tracejit
from tracejit.errors import BackwardHookError, SaveError
from tracejit.runtime.late_hooks import LateHookError

register = nn.modules.module.register_module_forward_hook
register_pre = nn.modules.module.register_module_forward_pre_hook


def doubled(mod, args, out):
    return out * 2


def shifted(mod, args):
    return (args[0] + 1,)


@pytest.fixture
def hooks():
    """Register global hooks through ``hooks(register, fn)``; every one is removed after the test."""
    handles = []

    def add(registrar, fn):
        handles.append(registrar(fn))
        return handles[-1]
    yield add
    for h in handles:
        h.remove()


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).eval()


X, NEW = torch.randn(2, 4), torch.randn(3, 4)


def quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("registrar,fn", [(register, doubled), (register_pre, shifted)], ids=["forward", "pre"])
def test_a_hook_registered_after_the_trace_is_refused_where_torch_jit_skips_it(hooks, registrar, fn):
    m = model()
    traced, jit = quiet(tracejit.trace, m, X), quiet(torch.jit.trace, m, X)
    hooks(registrar, fn)
    expected = m(NEW)
    assert not torch.allclose(jit(NEW), expected)   # the hook moves eager's answer; torch.jit's ignores it
    with pytest.raises(LateHookError, match=r"global module hooks registered now \(1 global forward"):
        traced(NEW)


def test_every_program_kind_refuses_a_late_global_hook(hooks):
    m = model()
    for p in m.parameters():
        p.requires_grad_(False)
    traced = quiet(tracejit.trace, m, X)
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    with torch.no_grad():
        programs = {"function": quiet(tracejit.trace, lambda a: m(a), X), "loaded": tracejit.load(buf),
                    "optimized": tracejit.optimize_for_inference(quiet(tracejit.trace, m, X)),
                    "method": quiet(tracejit.trace_module, m, {"forward": X, "__call__": X}).__call__}
        pytest.importorskip("onnxruntime")
        programs["onnxruntime"] = tracejit.optimize_for_inference(quiet(tracejit.trace, m, X), backend="onnxruntime")
        for name, program in programs.items():   # before: each answers eager's answer without hooks
            assert torch.allclose(program(NEW), m(NEW), atol=1e-6), name
        handle = hooks(register, doubled)
        for name, program in programs.items():
            with pytest.raises(LateHookError):
                program(NEW)
        handle.remove()
        for name, program in programs.items():   # and again once it is removed
            assert torch.allclose(program(NEW), m(NEW), atol=1e-6), name


def test_a_hook_traced_then_removed_gives_eagers_answer_and_registering_one_again_is_refused(hooks):
    m = model()
    handle = hooks(register, doubled)
    traced, jit = quiet(tracejit.trace, m, X), quiet(torch.jit.trace, m, X)
    assert torch.allclose(traced(NEW), m(NEW))   # the hook recorded, still registered
    handle.remove()
    expected = m(NEW)
    assert not torch.allclose(jit(NEW), expected)   # torch.jit keeps applying it
    assert torch.allclose(quiet(traced, NEW), expected)   # traced again without it
    hooks(register, doubled)   # another handle: not the hook the first trace recorded
    with pytest.raises(LateHookError, match=r"\(1 global forward hook\)"):
        traced(NEW)


def test_a_saved_file_keeps_a_hook_only_while_it_is_registered(hooks):
    m = model()
    handle = hooks(register, doubled)
    traced = quiet(tracejit.trace, m, X)
    handle.remove()
    with pytest.raises(SaveError, match="global module hooks"):
        tracejit.save(traced, io.BytesIO())


def test_a_global_backward_hook_is_refused_at_trace_time(hooks):
    hooks(nn.modules.module.register_module_full_backward_hook, lambda mod, gin, gout: None)
    with pytest.raises(BackwardHookError, match="global module backward hook"):
        tracejit.trace(model(), X)


def test_no_hook_means_no_guard_node_and_gradients_flow():
    m = model()
    traced = quiet(tracejit.trace, m, X)
    assert not [n for n in traced.graph.nodes if n.attrs.get("name") == "hooks"]
    x = NEW.clone().requires_grad_()
    traced(x).sum().backward()
    ref = NEW.clone().requires_grad_()
    m(ref).sum().backward()
    assert torch.allclose(x.grad, ref.grad)


def test_a_program_traced_with_global_hooks_is_neither_saved_nor_exported(hooks):
    hooks(register, doubled)
    traced = quiet(tracejit.trace, model(), X)
    with pytest.raises(SaveError, match="cannot check them where it is loaded"):
        tracejit.save(traced, io.BytesIO())
    pytest.importorskip("onnx")
    from tracejit.export.errors import ExportError
    with pytest.raises(ExportError, match="an ONNX model cannot check them"):
        tracejit.export_onnx(traced, io.BytesIO())
    assert torch.allclose(traced(NEW), model()(NEW))   # the live program still answers (the hook registered)
