"""A call that leaves out a traced input whose forward has a default (issue #22 item 2: "optional ones
may be left out by the caller where the model allows it"; runtime/omitted_inputs.py) gives eager's
answer: a live object traces the original without it, a saved file serves it from the
specializations it holds (``specialize_for``, ``trace --hf``: tests/serve/test_serve_hf.py runs those
in a fresh process), and an input the forward requires stays an ArgumentTypeError.

Each case first shows that leaving the input out moves eager's output (the forward's default is not
what the trace saw), so "equals eager" says the trace did not fill in a traced value."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch

import tracejit

transformers = pytest.importorskip("transformers")

from tracejit.hf_inputs import build_inputs, omittable_subsets  # noqa: E402


class Scaled(torch.nn.Module):
    """``x`` scaled, masked and shifted; ``mask`` and ``bias`` default to None (no mask, no shift)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, mask=None, bias=None):
        y = self.lin(x)
        if mask is not None:
            y = y * mask.unsqueeze(-1)
        if bias is not None:
            y = y + bias
        return y.sum(1)


class Required(torch.nn.Module):
    def forward(self, x, y):
        return x * y


def _inputs(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(batch, length, 4, generator=g), "mask": (torch.rand(batch, length, generator=g) > .3).float(),
            "bias": torch.randn(4, generator=g)}


def _without(inputs, *names):
    return {k: v for k, v in inputs.items() if k not in names}


def _trace(model, inputs, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        return tracejit.trace(model, example_kwarg_inputs=inputs, **kw)


@pytest.mark.parametrize("left_out", [("mask",), ("bias",), ("mask", "bias")])
def test_a_live_module_called_without_an_optional_input_gives_eagers_answer(left_out):
    torch.manual_seed(0)
    model = Scaled().eval()
    traced = _trace(model, _inputs(2, 5, 0))
    call = _without(_inputs(3, 7, 1), *left_out)
    assert not torch.allclose(model(**call), model(**_inputs(3, 7, 1)))   # leaving it out matters
    with pytest.warns(tracejit.TracerWarning, match="called without " + ", ".join(left_out)):
        got = traced(**call)
    torch.testing.assert_close(got, model(**call))
    assert len(traced.specializations) == 2
    # the next such call (other values, other sizes) runs that specialization: no new trace
    call = _without(_inputs(4, 2, 2), *left_out)
    torch.testing.assert_close(traced(**call), model(**call))
    torch.testing.assert_close(traced(**_inputs(4, 2, 3)), model(**_inputs(4, 2, 3)))   # all inputs: the first
    assert len(traced.specializations) == 2 and traced._specializations.traces == 1


def test_gradients_flow_through_the_specialization_traced_without_an_input():
    torch.manual_seed(0)
    model = Scaled()
    traced = _trace(model, _inputs(2, 5, 0))
    x = _inputs(3, 4, 1)["x"].requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced(x=x).pow(2).sum().backward()
    x2 = x.detach().clone().requires_grad_()
    model(x=x2).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_a_saved_program_serves_the_input_sets_it_was_specialized_for(tmp_path):
    torch.manual_seed(0)
    model = Scaled().eval()
    example = _inputs(2, 5, 0)
    traced = _trace(model, example, specialize_for=[_without(example, "mask"), _without(example, "mask", "bias")])
    assert [s.pinned for s in traced.specializations[:2]] == [True, True]
    tracejit.save(traced, tmp_path / "m.tjit")
    loaded = tracejit.load(tmp_path / "m.tjit")
    for left_out in [(), ("mask",), ("mask", "bias")]:
        call = _without(_inputs(3, 9, 4), *left_out)
        torch.testing.assert_close(loaded(**call), model(**call))
    # a set nobody asked for: a loaded program cannot trace; the error names the calls it serves
    with pytest.raises(tracejit.ArgumentTypeError, match=r"missing 1 required keyword-only argument: 'bias'"
                       r".*also serves calls as forward\(x: Tensor\[3d\], bias: Tensor\[1d\]\); "
                       r"forward\(x: Tensor\[3d\]\)"):
        loaded(**_without(_inputs(3, 9, 4), "bias"))


def test_an_optimized_program_keeps_the_specializations_without_an_input():
    torch.manual_seed(0)
    model = Scaled().eval()
    example = _inputs(2, 5, 0)
    traced = _trace(model, example, specialize_for=[_without(example, "bias")])
    fast = tracejit.optimize_for_inference(traced)
    call = _without(_inputs(3, 6, 5), "bias")
    torch.testing.assert_close(fast(**call), model(**call))
    torch.testing.assert_close(fast(**_inputs(3, 6, 6)), model(**_inputs(3, 6, 6)))


def test_a_required_input_left_out_is_an_argument_error_not_a_retrace():
    traced = _trace(Required(), {"x": torch.randn(3), "y": torch.randn(3)})
    with pytest.raises(tracejit.ArgumentTypeError, match=r"traced forward\(x: Tensor\[1d\], y: Tensor\[1d\]\) was "
                       r"called with 0 positional argument\(s\) and keyword arguments \['x'\]: .*missing 1 required"):
        traced(x=torch.randn(3))
    assert len(traced.specializations) == 1
    with pytest.raises(tracejit.ArgumentTypeError, match="unexpected keyword argument 'z'"):
        traced(x=torch.randn(3), y=torch.randn(3), z=torch.randn(3))   # a name the forward does not take


def test_a_wrong_value_is_still_the_generated_codes_argument_error():
    traced = _trace(Scaled().eval(), _inputs(2, 5, 0))
    with pytest.raises(tracejit.ArgumentTypeError, match=r"argument 'mask' should be a Tensor; got list"):
        traced(x=torch.randn(2, 5, 4), mask=[1.0], bias=torch.randn(4))
    assert len(traced.specializations) == 1


def test_a_traced_function_called_without_a_defaulted_argument():
    def f(x, scale=None):
        return x * 2 if scale is None else x * scale

    traced = _trace(f, {"x": torch.randn(3), "scale": torch.randn(3)})
    x = torch.randn(5)
    with pytest.warns(tracejit.TracerWarning, match="called without scale"):
        torch.testing.assert_close(traced(x=x), f(x))
    torch.testing.assert_close(traced(x, torch.full((5,), 3.0)), x * 3)


def test_threads_calling_with_mixed_input_sets(tmp_path):
    """8 threads, each call with another input set and size, on a loaded program: no wrong result, no error."""
    torch.manual_seed(0)
    model = Scaled().eval()
    example = _inputs(2, 5, 0)
    sets = [(), ("mask",), ("bias",), ("mask", "bias")]
    traced = _trace(model, example, specialize_for=[_without(example, *s) for s in sets[1:]])
    tracejit.save(traced, tmp_path / "m.tjit")
    loaded = tracejit.load(tmp_path / "m.tjit")
    calls = [_without(_inputs(1 + k % 4, 1 + k % 7, k), *sets[k % 4]) for k in range(16)]
    with torch.no_grad():
        expected = [model(**c) for c in calls]
    errors = []

    def work(t):
        try:
            for rep in range(25):
                k = (t * 5 + rep) % len(calls)
                with torch.no_grad():
                    got = loaded(**calls[k])
                if not torch.allclose(got, expected[k], atol=1e-6):
                    errors.append(f"thread {t} call {k}: wrong result")
        except Exception as e:   # the test fails on any; it names it
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


@pytest.fixture(scope="module")
def bert():
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
    torch.manual_seed(0)
    return transformers.BertModel(cfg).eval()


def test_a_live_bert_called_without_token_type_ids_or_attention_mask(bert):
    """The issue's case: traced with all three, called as tokenizers that return fewer call it."""
    names = ["input_ids", "token_type_ids", "attention_mask"]
    with torch.no_grad():
        traced = _trace(bert, build_inputs(bert.config, 2, 8, seed=0, names=names), strict=False)
        for left_out in omittable_subsets(bert, names):
            call = build_inputs(bert.config, 3, 13, seed=1, padded_row=0, names=[n for n in names if n not in left_out])
            full = build_inputs(bert.config, 3, 13, seed=1, padded_row=0, names=names)
            assert set(full) - set(call) == set(left_out)
            expected = bert(**call)
            assert not torch.allclose(expected.last_hidden_state, bert(**full).last_hidden_state)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", tracejit.TracerWarning)
                got = traced(**call)
            assert type(got) is type(expected)
            torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state)
            torch.testing.assert_close(got.pooler_output, expected.pooler_output)


def test_omittable_subsets_are_the_inputs_the_forward_has_defaults_for(bert):
    assert omittable_subsets(bert, ["input_ids", "token_type_ids", "attention_mask"]) == [
        ("token_type_ids",), ("attention_mask",), ("token_type_ids", "attention_mask")]
    assert omittable_subsets(Required(), ["x", "y"]) == []


class TwoMethods(torch.nn.Module):
    def forward(self, x):
        return x + 1

    def score(self, x, weight=None):
        return x.sum(-1) if weight is None else (x * weight).sum(-1)


def test_a_trace_module_method_called_without_a_defaulted_input():
    model = TwoMethods()
    example = {"forward": {"x": torch.randn(2, 3)}, "score": {"x": torch.randn(2, 3), "weight": torch.randn(3)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace_module(model, example, example_inputs_is_kwarg=True)
        x = torch.randn(4, 3)
        assert not torch.allclose(model.score(x), model.score(x, torch.randn(3)))
        torch.testing.assert_close(traced.score(x=x), model.score(x))
    assert len(traced.score.specializations) == 2
