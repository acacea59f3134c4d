"""The CUDA-graph backend's logic on the CPU (backends/cuda_graphs.py): the capture seam is replaced by
``ReplayOnCpu``, which keeps the same contract as a CUDA graph (static output buffers overwritten in place
by every replay; the program reads the static input buffers), so the cache, the signature check before
replay, the fallbacks, output cloning and threads are proved here; tests/device/test_cuda_graphs_on_gpu.py runs
the real ``torch.cuda.CUDAGraph`` where CUDA is present."""
from __future__ import annotations

import itertools
import threading
import time
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

import tracejit
from tracejit import pytree
from tracejit.backends import build
from tracejit.backends.cuda_graphs import CaptureError, CudaGraphCapture, CudaGraphProgram

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class _Recorder(TorchDispatchMode):
    """Records every ATen call a capture makes: what a CUDA graph holds (no Python, so no guard, runs again)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, kwargs or {}, out))
        return out


class ReplayOnCpu:
    """A CUDA graph's contract on the CPU: ``capture`` runs ``fn`` once (warm-up: the program's own errors
    come out as they are), then once more recording its ATen calls, and returns that call's outputs as the
    static buffers; ``replay`` reruns the recorded ATen calls only (no Python: the guards do not run, as in
    a real graph), reading the static input buffers and writing the answers into the static outputs.
    ``fail`` makes the capture fail as a CUDA capture of a syncing op does."""

    fail = False

    @staticmethod
    def accepts(device) -> bool:
        return device.type == "cpu"

    def __init__(self, device):
        self.calls = self.outputs = None

    def capture(self, fn):
        fn()
        if self.fail:
            raise CaptureError("RuntimeError: operation not permitted when stream is capturing")
        recorder = _Recorder()
        with recorder:
            self.outputs = fn()
        self.calls = recorder.calls   # holds every intermediate: their ids stay unique
        return self.outputs

    def replay(self) -> None:
        now: dict = {}

        def current(x):
            return now.get(id(x), x) if isinstance(x, torch.Tensor) else x
        for func, args, kwargs, out in self.calls:
            fresh = func(*tree_map(current, args), **tree_map(current, kwargs))
            for old, new in zip(tree_leaves(out), tree_leaves(fresh)):
                if isinstance(old, torch.Tensor):
                    now[id(old)] = new
            time.sleep(0)   # let another thread in mid-replay (a race shows up as a wrong answer)
        for static in pytree.flatten(self.outputs)[0]:
            if isinstance(static, torch.Tensor) and id(static) in now and now[id(static)] is not static:
                static.copy_(now[id(static)])


class FailingCapture(ReplayOnCpu):
    fail = True


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x))).softmax(-1)


def _mlp():
    torch.manual_seed(0)
    return Mlp().eval()


def _x(batch, seed=1, width=6):
    return torch.randn(batch, width, generator=torch.Generator().manual_seed(seed))


def _graphs(model, example, capturer=ReplayOnCpu, **options) -> CudaGraphProgram:
    return tracejit.optimize_for_inference(tracejit.trace(model, example), backend="cuda_graphs",
                                           capturer=capturer, **options)


def test_new_batch_sizes_replay_eagers_answer_one_graph_per_signature():
    model = _mlp()
    program = _graphs(model, (_x(2),))
    assert program.backend == "cuda_graphs" and program.not_captured == ""
    with torch.no_grad():
        for batch, seed in ((5, 2), (5, 3), (1, 4), (5, 5), (9, 6), (1, 7)):
            x = _x(batch, seed)
            want = model(x)
            assert not torch.equal(want, model(_x(batch, seed + 50)))   # the inputs move eager's answer
            torch.testing.assert_close(program(x), want)
    assert program.signatures == 3
    assert program.stats["captures"] == 3 and program.stats["replays"] == 6 and program.stats["program_runs"] == 0


def test_the_cache_keeps_the_least_recently_used_signatures_only():
    model = _mlp()
    program = _graphs(model, (_x(2),), cache_size=2)
    with torch.no_grad():
        for batch in (1, 2, 1, 3, 1, 2):
            torch.testing.assert_close(program(_x(batch, batch)), model(_x(batch, batch)))
    assert program.signatures == 2
    # 1, 2 captured; 1 replayed; 3 evicts 2; 1 replayed; 2 captured again (evicting 3)
    assert program.stats["captures"] == 4 and program.stats["replays"] == 6


def test_outputs_are_cloned_out_of_the_static_buffers():
    model = _mlp()
    program = _graphs(model, (_x(2),))
    with torch.no_grad():
        first = program(_x(4, 1))
        kept = first.clone()
        second = program(_x(4, 2))
    assert torch.equal(first, kept)   # the second call did not overwrite the first answer
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(second, model(_x(4, 2)))


def test_reuse_outputs_returns_the_static_buffers_that_the_next_call_overwrites():
    model = _mlp()
    program = _graphs(model, (_x(2),), reuse_outputs=True)
    with torch.no_grad():
        first = program(_x(4, 1))
        torch.testing.assert_close(first, model(_x(4, 1)))
        second = program(_x(4, 2))
    assert second is first
    torch.testing.assert_close(first, model(_x(4, 2)))


class WidthBranch(nn.Module):
    def forward(self, x):
        if x.shape[-1] > 8:
            return x.relu() * 2
        return x.sigmoid() - 1


def test_size_guards_choose_the_specialization_and_a_signature_none_fits_raises_guard_error():
    model = WidthBranch().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, (_x(2, width=4),))
        traced(_x(2, width=16))   # a second specialization, for wide inputs
        jit = torch.jit.trace(model, (_x(2, width=4),))
    program = tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu)
    with torch.no_grad():
        for width in (4, 16, 6, 12, 4):
            x = _x(3, width, width=width)
            torch.testing.assert_close(program(x), model(x))
        wide = _x(2, 9, width=12)
        assert not torch.allclose(jit(wide), model(wide))   # torch.jit.trace answers with the narrow branch
    assert program.signatures == 4


def test_a_call_no_specialization_fits_raises_guard_error_and_caches_nothing():
    model = WidthBranch().eval()
    traced = tracejit.trace(model, (_x(2, width=4),))
    traced.drop_original()   # as a loaded program: no retrace (an optimized program never retraces anyway)
    program = tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu)
    with torch.no_grad(), pytest.raises(tracejit.GuardError, match="x.shape"):
        program(_x(2, width=12))
    assert program.signatures == 0
    with torch.no_grad():
        torch.testing.assert_close(program(_x(3, 5, width=4)), model(_x(3, 5, width=4)))


def by_default_dtype(x):
    if torch.get_default_dtype() == torch.float64:
        return x * 2
    return x + 1


def test_a_global_state_guard_is_asked_before_every_replay():
    traced = tracejit.trace(by_default_dtype, (_x(2),))
    traced.drop_original()
    program = tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu)
    torch.testing.assert_close(program(_x(3)), _x(3) + 1)
    previous, x = torch.get_default_dtype(), _x(3)   # the same signature: float32, 3 x 6
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(tracejit.GuardError, match="get_default_dtype"):   # a stale replay answers x + 1
            program(x)
    finally:
        torch.set_default_dtype(previous)
    torch.testing.assert_close(program(_x(3, 4)), _x(3, 4) + 1)
    assert program.stats["replays"] == 2


def by_value(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def test_a_value_guard_means_no_graph_and_eagers_answer_both_ways():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(by_value, (torch.ones(3),))
        traced(-torch.ones(3))   # the other branch: a second specialization
    with pytest.warns(tracejit.TracerWarning, match="value guard .* is not decided by the input shapes"):
        program = tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu)
    assert "value guard" in program.not_captured
    for x in (torch.ones(4), -torch.ones(4)):
        torch.testing.assert_close(program(x), by_value(x))
    assert program.stats["replays"] == 0 and program.stats["program_runs"] == 2


def noisy(x):
    return x + torch.randn_like(x)


def test_a_random_op_means_no_graph():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = _graphs_fn(noisy, torch.ones(3))
    assert "randn_like" in program.not_captured and "draws random numbers" in program.not_captured
    torch.manual_seed(3)
    got = program(torch.ones(3))
    torch.manual_seed(3)
    torch.testing.assert_close(got, noisy(torch.ones(3)))


def _graphs_fn(fn, example, capturer=ReplayOnCpu, **options):
    return tracejit.optimize_for_inference(tracejit.trace(fn, example, check_trace=False), backend="cuda_graphs",
                                           capturer=capturer, **options)


def test_a_failed_capture_warns_once_and_that_signature_runs_the_program():
    model = _mlp()
    program = _graphs(model, (_x(2),), capturer=FailingCapture)
    with torch.no_grad():
        with pytest.warns(tracejit.TracerWarning, match="the CUDA graph capture failed .*operation not permitted"):
            torch.testing.assert_close(program(_x(4, 1)), model(_x(4, 1)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # no second warning for the same signature
            torch.testing.assert_close(program(_x(4, 2)), model(_x(4, 2)))
    assert program.stats == {"captures": 0, "replays": 0, "program_runs": 2, "failed_captures": 1}


def test_a_program_that_writes_its_input_never_replays_and_the_callers_tensor_is_written():
    def scale_in_place(x):
        x.mul_(2)
        return x + 1
    program = _graphs_fn(scale_in_place, torch.ones(3))
    x = torch.arange(4.0)
    with pytest.warns(tracejit.TracerWarning, match="writes one of its inputs in place"):
        out = program(x)
    torch.testing.assert_close(x, torch.arange(4.0) * 2)
    torch.testing.assert_close(out, torch.arange(4.0) * 2 + 1)
    program(x)
    torch.testing.assert_close(x, torch.arange(4.0) * 4)
    assert program.stats["replays"] == 0 and program.signatures == 0


def test_an_input_that_requires_grad_runs_the_program_with_autograd():
    model = _mlp()
    program = _graphs(model, (_x(2),))
    x = _x(3).requires_grad_()
    program(x).sum().backward()
    want = x.detach().clone().requires_grad_()
    model(want).sum().backward()
    torch.testing.assert_close(x.grad, want.grad)
    assert program.stats["replays"] == 0 and program.stats["program_runs"] == 1


def test_autocast_and_a_device_the_capturer_does_not_take_run_the_program():
    class MetaOnly(ReplayOnCpu):
        @staticmethod
        def accepts(device):
            return device.type == "meta"
    model = _mlp()
    program = _graphs(model, (_x(2),), capturer=MetaOnly)
    with torch.no_grad():
        torch.testing.assert_close(program(_x(3)), model(_x(3)))
    cpu_program = _graphs(model, (_x(2),))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = cpu_program(_x(3)), model(_x(3))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    assert program.stats["program_runs"] == 1 and cpu_program.stats["program_runs"] == 1


def test_the_default_capturer_takes_cuda_tensors_only():
    assert CudaGraphCapture.accepts(torch.device("cuda", 0)) and not CudaGraphCapture.accepts(torch.device("cpu"))
    model = _mlp()
    program = tracejit.optimize_for_inference(tracejit.trace(model, (_x(2),)), backend="cuda_graphs")
    with torch.no_grad():
        torch.testing.assert_close(program(_x(5)), model(_x(5)))
    assert program.stats["program_runs"] == 1


def test_bfloat16_is_opt_in_and_the_traced_program_is_not_changed():
    model = _mlp()
    traced = tracejit.trace(model, (_x(2),))
    program = tracejit.optimize_for_inference(traced, backend="cuda_graphs", capturer=ReplayOnCpu,
                                              dtype=torch.bfloat16)
    with torch.no_grad():
        x = _x(7, 3)
        got, want = program(x), model(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
    assert not torch.equal(got.float(), want)   # it did compute in bfloat16
    assert all(p.dtype == torch.float32 for p in traced.parameters())
    assert program.stats["replays"] == 1


@pytest.mark.parametrize("options, error, message", [
    ({"cache_size": 0}, ValueError, "cache_size must be an int >= 1; got 0"),
    ({"dtype": torch.float64}, ValueError, "dtype must be None, torch.bfloat16 or torch.float16; got torch.float64"),
    ({"reuse_outputs": "yes"}, TypeError, "reuse_outputs must be a bool; got 'yes'"),
])
def test_bad_options_say_what_was_expected(options, error, message):
    traced = tracejit.trace(_mlp(), (_x(2),))
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        build("cuda_graphs", traced, **options)


def test_eight_threads_with_their_own_shapes_get_their_own_answers():
    model = _mlp()
    program = _graphs(model, (_x(2),), cache_size=4)   # fewer graphs than threads: eviction under load
    errors = []

    def worker(k):
        try:
            for i in range(15):
                x = _x(1 + k % 6, seed=100 * k + i)
                with torch.no_grad():
                    got = program(x)
                    want = model(x)
                if not torch.allclose(got, want, rtol=1e-5, atol=1e-6):
                    errors.append((k, i, (got - want).abs().max().item()))
        except Exception as e:  # noqa: BLE001
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert program.signatures <= 4 and program.stats["replays"] == 8 * 15


def test_auto_leaves_cuda_graphs_out_on_the_cpu_and_says_why():
    traced = tracejit.trace(_mlp(), (_x(2),))
    ticks = itertools.count()
    auto = tracejit.optimize_for_inference(traced, backend="auto", candidates=("traced", "cuda_graphs"), budget_s=1.0,
                                           clock=lambda: next(ticks) * 1e-3)   # a fake clock: the budget is not spent
    assert auto.backend == "traced"
    assert "cuda_graphs: not built: the program runs on cpu; CUDA graphs need a CUDA program" in auto.report
