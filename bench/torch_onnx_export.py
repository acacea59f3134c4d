"""torch.onnx's export of a bench workload (legacy exporter, else dynamo), and the small helpers the bench
scripts share. Imports torch only: bench/peer_builders.export_in_child runs ``export_in_process`` in a fresh
child process, which should not pay for tracejit, onnxruntime or OpenVINO."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _short(exc: BaseException, limit: int = 90) -> str:
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/").replace("`", "'")
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


class _Quiet:
    """Silence Python warnings (jit deprecation, tracer warnings, nested tensor...)."""

    def __enter__(self) -> None:
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)


class FnModule(nn.Module):
    """A plain function as a module (for freezing and ONNX export)."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def _as_module(fn: Any) -> nn.Module:
    return fn if isinstance(fn, nn.Module) else FnModule(fn).eval()


@contextlib.contextmanager
def _native_output_silenced() -> Any:
    """Discard what native code writes to file descriptors 1 and 2."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)



def export_in_process(fn: Any, args: tuple) -> tuple[bytes, str]:
    module = _as_module(fn).eval()
    names = [f"input_{i}" for i in range(len(args))]
    errors = []
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)  # "torchvision is not installed" etc.
    try:
        # redirect_stdout: the dynamo exporter's progress chatter
        with _Quiet(), contextlib.redirect_stdout(io.StringIO()):
            try:
                buf = io.BytesIO()
                with _native_output_silenced():  # on failure the C++ side dumps the whole TorchScript graph
                    torch.onnx.export(module, args, buf, input_names=names, dynamo=False)
                return buf.getvalue(), "legacy exporter"
            except Exception as exc:  # noqa: BLE001
                errors.append(f"legacy: {_short(exc, 70)}")
                log(f"  legacy ONNX export failed ({_short(exc, 200)}); trying dynamo=True")
            try:
                program = torch.onnx.export(module, args, input_names=names, dynamo=True)
                how = "dynamo exporter (legacy failed: " + errors[0].split(": ", 1)[1][:60] + ")"
                return program.model_proto.SerializeToString(), how
            except Exception as exc:  # noqa: BLE001
                errors.append(f"dynamo: {_short(exc, 70)}")
    finally:
        onnx_logger.setLevel(level)
    raise RuntimeError("; ".join(errors))


