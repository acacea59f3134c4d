"""``trace --hf`` picks the example inputs from what the model's forward takes, not only from its config
(serve25): BEiT's config holds a ``vocab_size`` (its masked-image-modelling head) beside ``image_size``,
so the config rule called it a text model, built ``attention_mask`` alone and failed with a binding error
about ``pixel_values``. Traced from pixels, the file serves new batches like eager. A forward that takes
none of token ids, pixels or mel features (HuBERT's ``input_values``) is refused by name."""
from __future__ import annotations

import io
import contextlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tracejit  # noqa: E402
from tracejit import cli  # noqa: E402
from tracejit.hf_inputs import modality  # noqa: E402

VIT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, image_size=32,
           patch_size=8)


def _trace_cli(model, tmp_path):
    model.save_pretrained(str(tmp_path / "model"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            rc = cli.main(["trace", "--hf", str(tmp_path / "model"), "-o", str(tmp_path / "m.tjit")])
        except SystemExit as e:   # the CLI's error exit
            rc = e.code
    return rc, out.getvalue()


def test_beit_is_traced_from_pixels_and_serves_new_batches(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    config = transformers.BeitConfig(**VIT, use_relative_position_bias=True)
    assert config.vocab_size and modality(config) == "text"   # the config alone says text
    model = transformers.BeitModel(config).eval()
    rc, said = _trace_cli(model, tmp_path)
    assert rc == 0, said
    loaded = tracejit.load(str(tmp_path / "m.tjit"))
    g = torch.Generator().manual_seed(5)
    for batch in (1, 3):
        pixels = torch.randn(batch, 3, 32, 32, generator=g)
        with torch.no_grad():
            got, want = loaded(pixel_values=pixels), model(pixel_values=pixels)
        assert list(got.keys()) == list(want.keys())
        for key in want.keys():
            torch.testing.assert_close(got[key], want[key], rtol=1e-4, atol=1e-4)


def test_a_forward_without_a_known_input_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = transformers.HubertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                       conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                                       num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    rc, said = _trace_cli(transformers.HubertModel(config).eval(), tmp_path)
    assert rc != 0
    assert "HubertConfig" in said and "input_values" in said and "pixel_values" in said, said
