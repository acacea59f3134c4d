"""Real models whose exported ONNX model was wrong or failed obscurely on a new shape (bench/serve_corpus19.py),
tiny configs, random weights: onnxruntime gives eager's answer on the new shape, or refuses it with an error
naming the source line the trace relied on (export/guard_checks.py).

- transformers' Mamba (slow path) scans ``for index in range(seq_len)``: the loop is unrolled to the traced
  length; ``seq_len`` is an intermediate's size, so the export pinned no input dim and onnxruntime failed on a
  broadcast "16 by 24" (a scan whose result is not broadcast against the length would answer a wrong number).
- MobileViT (timm's ``mobilevit_xxs``, transformers' MobileViTModel) at 96 pixels after a 64-pixel trace: a
  Reshape error in onnxruntime. timm's block interpolates a feature map whose size is not a multiple of the
  patch (``if new_h != H``, mobilevit.py:252): at 96 a stage is 3 wide, eager interpolates, the trace did not
  (a genuine specialization: the model refuses it, naming that line; at 128 no stage interpolates and the
  symbolic patch sizes give eager's answer). transformers computes the patch grid with ``torch_int(...)`` =
  ``int(size)`` while tracing: the grid is a number in the program (pinned), so another size is refused,
  naming transformers/utils/generic.py (torch_int's line; the same guard a loaded file raises).
"""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

import tracejit
from model_corpus import LastHidden

ort = pytest.importorskip("onnxruntime")
pytestmark = [pytest.mark.filterwarnings("ignore::tracejit.TracerWarning"),
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")]


def _mamba():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, state_size=8,
                                      use_cache=False)
    return LastHidden(transformers.MambaModel(config).eval()).eval()


def _timm_mobilevit():
    from zoo_check import randomise_batch_norm, torchvision_or_skip
    torchvision_or_skip()   # timm imports torchvision
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (make test installs it)")
    import timm
    torch.manual_seed(0)
    return randomise_batch_norm(timm.create_model("mobilevit_xxs", pretrained=False, num_classes=10)).eval()


def _hf_mobilevit():
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.MobileViTConfig(hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64])
    return LastHidden(transformers.MobileViTModel(config).eval()).eval()


def _run(proto, *inputs):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(o) for o in session.run(None, feed)]


def test_mamba_onnx_serves_a_new_batch_and_refuses_a_new_length_naming_the_scan_line():
    model = _mamba()
    example = torch.randint(0, 1000, (2, 16))
    with torch.no_grad():
        traced = tracejit.trace(model, (example,))
        proto = tracejit.export_onnx(traced)
        batch = torch.randint(0, 1000, (3, 16))
        torch.testing.assert_close(_run(proto, batch)[0], model(batch), atol=1e-5, rtol=1e-4)
        longer = torch.randint(0, 1000, (2, 24))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jit = torch.jit.trace(model, (example,), check_trace=False)
        with pytest.raises(RuntimeError):
            jit(longer)   # torch.jit.trace: an error inside the scan
        with pytest.raises(Exception, match=r"tracejit_guard_\d+_failed_at_transformers/models/mamba/"
                                            r"modeling_mamba.py:\d+"):
            _run(proto, longer)


@pytest.mark.parametrize("which", ["timm", "transformers"])
def test_mobilevit_onnx_at_another_image_size_gives_eagers_answer_or_names_the_line(which):
    model = _timm_mobilevit() if which == "timm" else _hf_mobilevit()
    example = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        traced = tracejit.trace(model, (example,))
        proto = tracejit.export_onnx(traced)
        batch = torch.randn(3, 3, 64, 64)
        torch.testing.assert_close(_run(proto, batch)[0], model(batch), atol=1e-4, rtol=1e-4)
        if which == "timm":   # no stage needs interpolating at 128: the traced branch holds, sizes symbolic
            bigger = torch.randn(1, 3, 128, 128)
            torch.testing.assert_close(_run(proto, bigger)[0], model(bigger), atol=1e-4, rtol=1e-4)
        line = "timm/models/mobilevit.py:252" if which == "timm" else "transformers/utils/generic.py:"
        with pytest.raises(Exception, match=rf"tracejit_guard_\d+_failed_at_\S*{line}"):
            _run(proto, torch.randn(2, 3, 96, 96))   # before: a Reshape error of the traced patch grid
