"""Real transformers models (tiny configs as in tests/models, random weights) traced in float32 on cpu,
then moved with traced.double() / .to(torch.bfloat16): equal to eager moved the same way. Their masks use
torch.finfo(dtype).min, .to(hidden_states.dtype), arange(device=...) and RMSNorm's float32 upcast."""
import copy
import warnings

import pytest
import torch

import tracejit

transformers = pytest.importorskip("transformers")


def llama(attn):
    cfg = transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        initializer_range=0.2, attn_implementation=attn)
    return transformers.LlamaModel(cfg)


def bert():
    cfg = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, pad_token_id=0, initializer_range=0.2, attn_implementation="eager")
    return transformers.BertModel(cfg)


class Hidden(torch.nn.Module):
    def __init__(self, model, **kwargs):
        super().__init__()
        self.model = model
        self.kwargs = kwargs

    def forward(self, ids, mask):
        return self.model(ids, attention_mask=mask, return_dict=False, **self.kwargs)[0]


BUILDERS = {"llama_sdpa": lambda: Hidden(llama("sdpa"), use_cache=False),
            "llama_eager": lambda: Hidden(llama("eager"), use_cache=False),
            "bert_eager": lambda: Hidden(bert())}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_traced_in_float32_runs_in_float64_and_bfloat16_like_eager(name):
    torch.manual_seed(0)
    model = BUILDERS[name]().eval()
    ids = torch.randint(3, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)
        traced = tracejit.trace(model, (ids, mask))
        new_ids = torch.randint(3, 100, (2, 7))
        new_mask = mask.clone()
        new_mask[0, 6:] = 0
        for dtype in (torch.float64, torch.bfloat16):
            traced.to(dtype)
            eager = copy.deepcopy(model).to(dtype)
            out, expected = traced(new_ids, new_mask), eager(new_ids, new_mask)
            assert out.dtype == expected.dtype == dtype
            assert torch.equal(out, expected), f"{name} in {dtype}"
