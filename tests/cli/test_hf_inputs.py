"""``trace --hf``'s inputs (tracejit/hf_inputs.py): what the saved tokenizer returns that the forward accepts,
the modality's defaults without a tokenizer file, ``--inputs`` to name them, a clear error for a name the
forward does not take."""
from __future__ import annotations

import os
import shutil
import sys

import pytest
import torch

pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "serve"))
import tiny_models  # noqa: E402  (tiny BERT / GPT-2 / T5 saved with a tokenizer; makes torchvision importable)

import tracejit  # noqa: E402
from tracejit import cli, hf_inputs  # noqa: E402


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hfin")
    out = {name: tiny_models.save(name, str(root / name)) for name in ("bert", "gpt2", "t5")}
    bare = root / "bert-no-tokenizer"   # weights and config only
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(out["bert"], f), bare / f)
    out["bare"] = str(bare)
    return out


@pytest.mark.parametrize("name,expected", [
    ("bert", ["input_ids", "token_type_ids", "attention_mask"]),
    ("gpt2", ["input_ids", "attention_mask"]),
    ("t5", ["input_ids", "attention_mask", "decoder_input_ids"]),
    ("bare", ["input_ids", "attention_mask"]),
])
def test_the_inputs_are_the_tokenizers(dirs, name, expected):
    model = tiny_models.build("bert" if name == "bare" else name)
    assert hf_inputs.input_names(model, model.config, dirs[name]) == expected


def test_inputs_names_them_and_the_file_takes_those(dirs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "b.tjit"
    assert cli.main(["trace", "--hf", dirs["bert"], "--inputs", "input_ids,attention_mask", "--no-check",
                     "-o", str(path)]) == 0
    assert "example:    input_ids: int64[2, 8], attention_mask: int64[2, 8]" in capsys.readouterr().out
    loaded, model = tracejit.load(path), tiny_models.build("bert")
    request = tiny_models.request("bert", dirs["bert"], 3, [8, 5], seed=4)   # padded, batch 3
    with pytest.raises(tracejit.errors.ArgumentTypeError, match="token_type_ids"):
        loaded(**request)
    del request["token_type_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(**request).last_hidden_state, model(**request).last_hidden_state)


def test_a_name_the_forward_does_not_take(dirs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as info:
        cli.main(["trace", "--hf", dirs["gpt2"], "--inputs", "input_ids,pixel_values", "-o", str(tmp_path / "g")])
    err = capsys.readouterr().err
    assert info.value.code == 1 and len(err.splitlines()) == 1
    assert "GPT2LMHeadModel.forward takes no 'pixel_values'; it takes input_ids," in err
    with pytest.raises(SystemExit) as info:
        cli.main(["trace", "models:x", "--inputs", "input_ids", "-o", str(tmp_path / "g")])
    assert info.value.code == 2 and "--inputs only go with --hf" in capsys.readouterr().err
