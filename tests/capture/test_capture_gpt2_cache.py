"""GPT-2 with use_cache=True (issue 10): transformers' DynamicCache is not registered with torch's pytree,
so tracejit refuses it with a clear error instead of returning the trace-time cache. The same tiny config as
tests/models (random weights, no network)."""
import warnings

import pytest
import torch

import tracejit

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.errors.TracerWarning")

transformers = pytest.importorskip("transformers")


def tiny_gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  bos_token_id=1, eos_token_id=2, initializer_range=0.2)
    return transformers.GPT2LMHeadModel(cfg).eval()


class Step(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_key_values=None):
        return self.model(input_ids, past_key_values=past_key_values, use_cache=True, return_dict=False)


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False, return_dict=False)[0]


def test_use_cache_output_is_refused_with_a_clear_error_not_frozen():
    step = Step(tiny_gpt2())
    with torch.no_grad(), pytest.raises(tracejit.TraceError, match=r"DynamicCache .*cannot flatten.*use_cache=False"):
        tracejit.trace(step, (torch.randint(3, 100, (1, 5)),), check_trace=False)


def test_cache_passed_back_in_is_refused_too():
    model = tiny_gpt2()
    ids = torch.randint(3, 100, (1, 5))
    with torch.no_grad():
        _, cache = model(ids, use_cache=True, return_dict=False)
        with pytest.raises(tracejit.TraceError, match="DynamicCache"):
            tracejit.trace(Step(model), (ids[:, -1:], cache), check_trace=False)


def test_decode_loop_without_cache_equals_eager():
    logits = Logits(tiny_gpt2())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace(logits, (torch.randint(3, 100, (1, 4)),), check_trace=False)
        ids_traced = ids_eager = torch.randint(3, 100, (1, 3))
        for _ in range(4):     # greedy decoding: the sequence grows by one each step
            ids_traced = torch.cat([ids_traced, traced(ids_traced)[:, -1:].argmax(-1)], 1)
            ids_eager = torch.cat([ids_eager, logits(ids_eager)[:, -1:].argmax(-1)], 1)
    assert torch.equal(ids_traced, ids_eager)
