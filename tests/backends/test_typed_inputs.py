"""backends/typed_inputs.py: inputs made from a graph's recorded input types, on the recorded device (what auto's
timing uses for a program saved without its example inputs, and the CUDA pass timing for every CUDA program)."""
from __future__ import annotations

import pytest
import torch

import tracejit
from tracejit.backends.typed_inputs import inputs_of_types
from tracejit.ir import TensorType

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


def _graph(*args, **kwargs):
    fn = lambda x, ids, mask, scale=None: x[ids] * mask[ids].unsqueeze(-1) * (1 if scale is None else scale)  # noqa: E731
    if kwargs:
        return tracejit.trace(fn, example_inputs=args, example_kwarg_inputs=kwargs).graph
    return tracejit.trace(fn, args).graph


def test_each_dtype_gets_a_tensor_of_its_type_floats_random_integers_zero_booleans_true():
    graph = _graph(torch.randn(5, 3, dtype=torch.float64), torch.tensor([4, 1]), torch.tensor([True, False] * 2 + [True]))
    (x, ids, mask), kwargs = inputs_of_types(graph)
    assert (x.dtype, x.shape, ids.dtype, ids.shape, mask.dtype, mask.shape) == \
        (torch.float64, (5, 3), torch.int64, (2,), torch.bool, (5,))
    assert x.std() > 0.5 and not ids.any() and mask.all() and kwargs == {}


def test_the_callers_random_numbers_are_untouched_and_each_call_makes_the_same_inputs():
    graph = _graph(torch.randn(5, 3), torch.tensor([4, 1]), torch.ones(5, dtype=torch.bool))
    torch.manual_seed(3)
    first = inputs_of_types(graph)[0][0]
    after = torch.rand(2)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(2)) and torch.equal(first, inputs_of_types(graph)[0][0])


def test_inputs_are_made_on_the_recorded_device():
    graph = _graph(torch.randn(5, 3), torch.tensor([4, 1]), torch.ones(5, dtype=torch.bool))
    for v in graph.inputs:   # as a program traced on another device records them
        v.type = TensorType(v.type.dtype, v.type.shape, "meta")
    args, _ = inputs_of_types(graph)
    assert {a.device.type for a in args} == {"meta"}


def test_keyword_arguments_come_back_as_keywords():
    graph = _graph(torch.randn(5, 3), torch.tensor([4, 1]), torch.ones(5, dtype=torch.bool), scale=torch.randn(()))
    args, kwargs = inputs_of_types(graph)
    assert len(args) == 3 and set(kwargs) == {"scale"} and kwargs["scale"].shape == ()


@pytest.mark.parametrize("dtype, shape", [(torch.complex64, (5, 3)), (torch.quint8, (5, 3)), (torch.float32, (-1, 3))])
def test_a_type_it_cannot_make_gives_none(dtype, shape):
    graph = _graph(torch.randn(5, 3), torch.tensor([4, 1]), torch.ones(5, dtype=torch.bool))
    graph.inputs[0].type = TensorType(dtype, shape, "cpu")
    assert inputs_of_types(graph) is None
