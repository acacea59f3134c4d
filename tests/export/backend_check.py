"""The ONNX backends (onnxruntime, and OpenVINO when installed) against eager and torch.jit's trace:
the one check the export edge-value tests share."""
from __future__ import annotations

import importlib.util

import onnx
import torch

import tracejit

BACKENDS = ["onnxruntime"] + (["openvino"] if importlib.util.find_spec("openvino") else [])


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def assert_backends_match(fn, example, new_inputs, what, *, rtol=1e-4, atol=1e-5, equal_nan=False):
    """Trace ``fn`` on ``example``; its export passes the ONNX checker, and each backend gives eager's
    and torch.jit's trace's outputs (dtype, shape, values) on the example and on ``new_inputs``.
    Without ``equal_nan`` a NaN in eager's answer fails the check: the case must have a number."""
    with torch.no_grad():
        traced = tracejit.trace(fn, example)
        onnx.checker.check_model(tracejit.export_onnx(traced), full_check=True)
        reference = torch.jit.trace(fn, example, check_trace=False)
        for backend in BACKENDS:
            program = tracejit.optimize_for_inference(traced, backend=backend)
            for inputs in [example, *new_inputs]:
                got = _as_tuple(program(*inputs))
                for name, want in (("eager", _as_tuple(fn(*inputs))), ("torch.jit", _as_tuple(reference(*inputs)))):
                    assert len(got) == len(want), f"{what} {backend}: {len(got)} outputs, {name} {len(want)}"
                    for g, w in zip(got, want):
                        assert g.dtype == w.dtype and g.shape == w.shape, \
                            f"{what} {backend}: {g.dtype}{tuple(g.shape)}, {name} {w.dtype}{tuple(w.shape)}"
                        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan,
                                                   msg=lambda m: f"{what} {backend} vs {name}: {m}")


def closure(program):
    """The closure an exported backend's program runs a call through: under the check of the settings the trace
    held beside the graph (onnx_call._with_settings_check, whose ``__wrapped__`` it is) where there is one."""
    call = program._call
    return call.__wrapped__ if call.__name__ == "settings_checked" else call
