"""OpenVINO and ONNX sequences (backends/openvino.py ``_refuse_sequences``): a mixture of experts' grouped product
exports as a ``Loop`` appending each expert's rows to a sequence (export/grouped_mm.py). OpenVINO's CPU plugin ran
it with the wrong number of rows (24 for 16 tokens, no error), and on a small Mixtral ``backend="auto"`` aborted
the process (heap corruption inside OpenVINO's ``infer``). The OpenVINO backend now refuses such a model with a
clear error, and ``auto`` leaves the OpenVINO candidate out: eager's answers on new numbers of tokens.

breadth27: the OpenVINO backend exports ``loop_free`` (export/grouped_mm.py: every group's product, each row's own
picked with GatherElements, no Loop and no sequence), so a mixture of experts now runs on OpenVINO with eager's
answers on new token counts / lengths; the refusal stays for any other live sequence.)"""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from torch import nn

import tracejit

pytest.importorskip("openvino")
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.filterwarnings("ignore::tracejit.TracerWarning")


class Experts(nn.Module):
    """Tokens sorted by expert, counted, one grouped product (transformers' integrations/moe.py in small)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 8, 16) / 3)
        self.router = nn.Linear(8, 4)

    def forward(self, x):
        ids = self.router(x).argmax(-1)
        ids, perm = torch.sort(ids)
        offs = torch.cumsum(torch.histc(ids.float(), bins=4, min=0, max=3), 0, dtype=torch.int32)
        y = torch._grouped_mm(x[perm], self.w, offs=offs)
        out = torch.zeros_like(y)
        out[perm] = y
        return out


def _experts():
    torch.manual_seed(0)
    return Experts().eval()


def _no_loops(proto):
    return not any(n.op_type == "Loop" or "Sequence" in n.op_type for n in proto.graph.node)


def test_openvino_runs_the_grouped_product_loop_free_with_eagers_answers():
    model = _experts()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(16, 8))
        program = tracejit.optimize_for_inference(traced, backend="openvino")   # before: refused (sequences)
        assert _no_loops(program.proto), [n.op_type for n in program.proto.graph.node]
        for n in (16, 5, 33, 1):
            x = torch.randn(n, 8, generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(program(x), model(x), rtol=1e-5, atol=1e-5)
        assert program.handed_over == 0   # OpenVINO's answers


def test_loop_free_export_equals_eager_in_onnxruntime():
    model = _experts()
    with torch.no_grad():
        proto = tracejit.export_onnx(tracejit.trace(model, torch.randn(16, 8)), loop_free=True)
        assert _no_loops(proto)
        session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
        for n in (16, 7, 40):
            x = torch.randn(n, 8, generator=torch.Generator().manual_seed(n + 1))
            got = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
            torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)


def test_auto_gives_eagers_answers_on_new_token_counts():
    model = _experts()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(16, 8))
        program = tracejit.optimize_for_inference(traced, backend="auto", budget_s=0.2)
        for n in (16, 5, 33):
            x = torch.randn(n, 8, generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(program(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_small_mixtral_runs_on_openvino_and_auto_serves_a_new_length():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                                        use_cache=False, num_local_experts=4, num_experts_per_tok=2)
    mixtral = transformers.MixtralModel(config).eval()
    model = lambda ids: mixtral(input_ids=ids, return_dict=False)[0]  # noqa: E731
    ids = lambda b, n, seed: torch.randint(3, 1000, (b, n), generator=torch.Generator().manual_seed(seed))  # noqa: E731
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = tracejit.trace(model, ids(2, 16, 1))
        on_openvino = tracejit.optimize_for_inference(traced, backend="openvino")   # before: refused
        program = tracejit.optimize_for_inference(traced, backend="auto", budget_s=0.2)
        for inputs in (ids(2, 16, 2), ids(2, 24, 3)):
            torch.testing.assert_close(program(inputs), model(inputs), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(on_openvino(inputs), model(inputs), rtol=1e-5, atol=1e-5)
        assert on_openvino.handed_over == 0


class Attention(nn.Module):
    """timm's attention: ``qkv.unbind(0)`` (torch_lib's SplitToSequence, unpacked to a plain Split:
    export/sequences.py)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, 2, c // 2).permute(2, 0, 3, 1, 4).unbind(0)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c)


def test_an_unread_split_to_sequence_does_not_refuse_openvino():
    torch.manual_seed(0)
    model = Attention().eval()
    with torch.no_grad():
        traced = tracejit.trace(model, torch.randn(1, 5, 16))
        assert any(n.op_type == "SplitToSequence" for n in tracejit.export_onnx(traced).graph.node)
        program = tracejit.optimize_for_inference(traced, backend="openvino")
        for shape in ((1, 5, 16), (3, 9, 16)):
            x = torch.randn(*shape)
            torch.testing.assert_close(program(x), model(x), rtol=1e-4, atol=1e-5)
