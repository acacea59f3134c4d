"""``tracejit trace --hf DIR`` (tracejit/hf.py, tracejit/cli/hf.py): BERT, GPT-2, ViT, Whisper and T5
saved locally from the tiny configs of tests/models; the saved program equals eager transformers
on new inputs (other values, batch sizes, lengths, padding). The network is never touched."""
from __future__ import annotations

import os
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tracejit  # noqa: E402
from tracejit import cli, hf  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "models"))
import model_corpus as corpus  # noqa: E402  (the tiny-config builders)

BUILDERS = {
    "bert": lambda: corpus.build_bert("eager")().model,
    "gpt2": lambda: corpus.build_gpt2().model,
    "vit": lambda: corpus.build_vit(False)().model,
    "whisper": lambda: corpus.build_whisper().model,
    "t5": lambda: corpus.build_t5().model,
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """name -> (directory made with save_pretrained, the eager model)."""
    root = tmp_path_factory.mktemp("hf")
    out = {}
    torch.manual_seed(0)
    for name, build in BUILDERS.items():
        model = build().eval()
        model.save_pretrained(root / name)
        out[name] = (str(root / name), model)
    return out


def _trace_cli(directory, output, capsys, *extra):
    code = cli.main(["trace", "--hf", directory, "-o", str(output), *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out


def _new_inputs(name: str, g: torch.Generator) -> dict:
    """Inputs the trace never saw: batch 4, other lengths, padding on two rows, other values."""
    if name in ("bert", "gpt2", "t5"):
        ids = torch.randint(0, 100, (4, 11), generator=g)
        mask = torch.ones_like(ids)
        mask[0, 7:] = 0
        mask[2, 4:] = 0
        dec = {"decoder_input_ids": torch.randint(0, 100, (4, 6), generator=g)} if name == "t5" else {}
        return {"input_ids": ids, "attention_mask": mask, **dec}
    if name == "vit":
        return {"pixel_values": torch.randn(4, 3, 32, 32, generator=g)}
    return {"input_features": torch.randn(4, corpus.WHISPER_MEL_BINS, corpus.WHISPER_FRAMES, generator=g),
            "decoder_input_ids": torch.randint(0, 100, (4, 5), generator=g)}


def _assert_equal_outputs(loaded_out, eager_out):
    expected = {k: v for k, v in eager_out.items() if isinstance(v, torch.Tensor)}
    assert set(loaded_out) == set(expected)
    for k, v in expected.items():
        assert loaded_out[k].shape == v.shape, k
        torch.testing.assert_close(loaded_out[k], v, rtol=1e-4, atol=1e-4, msg=k)


@pytest.mark.parametrize("name,task,outputs", [
    ("bert", "feature-extraction", {"last_hidden_state", "pooler_output"}),
    ("gpt2", "causal-lm", {"logits"}),
    ("vit", "feature-extraction", {"last_hidden_state", "pooler_output"}),
    ("whisper", "speech", {"logits", "encoder_last_hidden_state"}),
    ("t5", "seq2seq", {"logits", "encoder_last_hidden_state"}),
])
def test_trace_hf_saves_a_program_equal_to_eager(saved, tmp_path, capsys, name, task, outputs):
    directory, model = saved[name]
    out = _trace_cli(directory, tmp_path / "m.tjit", capsys)
    assert f"task {task}" in out.out and "checked:    equals eager transformers" in out.out
    if name == "bert":   # inspect marks the sizes read inside the submodules (ir/symbolic_dims.py)
        assert cli.main(["inspect", str(tmp_path / "m.tjit")]) == 0
        # the mask accepts every size the ids do: named as the viewer names it (viewer/sizes.py)
        assert "forward(input_ids: Long[s0, s1], attention_mask: Long[s0, s1])" in capsys.readouterr().out
    loaded = tracejit.load(tmp_path / "m.tjit")
    g = torch.Generator().manual_seed(7)
    for _ in range(2):
        inputs = _new_inputs(name, g)
        with torch.no_grad():
            got, expected = loaded(**inputs), model(**inputs, use_cache=False) if name != "vit" else model(**inputs)
        assert set(got) == outputs
        _assert_equal_outputs(got, expected)
    # the inputs move the outputs (so the equality above is not trivial)
    other = _new_inputs(name, g)
    first = next(iter(sorted(outputs)))
    assert not torch.allclose(loaded(**other)[first], loaded(**inputs)[first])


def test_example_inputs_follow_the_config(saved):
    bert = transformers.AutoConfig.from_pretrained(saved["bert"][0])
    ex = hf.build_inputs(bert, 2, 8)
    assert ex["input_ids"].shape == (2, 8) and int(ex["input_ids"].max()) < bert.vocab_size
    assert ex["attention_mask"][-1].tolist() == [1] * 5 + [0] * 3 and bool(ex["attention_mask"][0].all())
    whisper = transformers.AutoConfig.from_pretrained(saved["whisper"][0])
    ex = hf.build_inputs(whisper, 3, 40)
    assert ex["input_features"].shape == (3, whisper.num_mel_bins, 2 * whisper.max_source_positions)
    assert ex["decoder_input_ids"].shape == (3, whisper.max_target_positions)   # 40 capped by the positions
    vit = transformers.AutoConfig.from_pretrained(saved["vit"][0])
    assert hf.build_inputs(vit, 1, 8)["pixel_values"].shape == (1, 3, 32, 32)
    assert hf.check_sizes(vit, 2, 8)[0] == 3 and "image size" in hf.check_sizes(vit, 2, 8)[2]


@pytest.mark.parametrize("architectures,task", [
    (["BertModel"], "feature-extraction"), (["GPT2LMHeadModel"], "causal-lm"),
    (["LlamaForCausalLM"], "causal-lm"), (["BertForSequenceClassification"], "text-classification"),
    (["ViTForImageClassification"], "image-classification"), (["T5ForConditionalGeneration"], "seq2seq"),
    (None, "feature-extraction"),
])
def test_task_from_architectures(architectures, task):
    cfg = transformers.BertConfig(architectures=architectures)
    assert hf.infer_task(cfg) == task
    whisper = transformers.WhisperConfig(architectures=["WhisperForConditionalGeneration"])
    assert hf.infer_task(whisper) == "speech"


def test_options_and_padding_reach_the_trace(saved, tmp_path, capsys):
    """--task, --batch, --length: the example has those sizes; a text-classification head is loaded."""
    directory, _ = saved["bert"]
    out = _trace_cli(directory, tmp_path / "c.tjit", capsys, "--task", "text-classification", "--batch", "1",
                     "--length", "5", "--no-check")
    assert "BertForSequenceClassification" in out.out and "input_ids: int64[1, 5]" in out.out
    assert "checked:    no" in out.out
    loaded = tracejit.load(tmp_path / "c.tjit")
    ids = torch.randint(0, 100, (3, 9))
    assert loaded(input_ids=ids, attention_mask=torch.ones_like(ids))["logits"].shape == (3, 2)


def test_no_terminal_no_progress_bar(saved, tmp_path, capsys):
    out = _trace_cli(saved["vit"][0], tmp_path / "v.tjit", capsys)
    for text in (out.out, out.err):
        assert "\r" not in text and "█" not in text and "step" not in text and "Loading weights" not in text


def test_a_terminal_without_tqdm_gets_plain_lines(saved, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setitem(sys.modules, "tqdm", None)   # import tqdm fails
    out = _trace_cli(saved["vit"][0], tmp_path / "t.tjit", capsys)
    assert out.err == "load ...\ntrace ...\ncheck ...\nsave ...\n"
    assert "checked:    equals eager transformers" in out.out


def test_progress_bar_on_a_terminal(capsys):
    from tracejit.cli.hf import Progress
    pytest.importorskip("tqdm")
    p = Progress(True)
    for step in Progress.STEPS:
        p(step)
    p.close()
    err = capsys.readouterr().err
    assert "\r" in err and "trace" in err and "save" in err
    Progress(False)("load")   # off: nothing at all
    assert capsys.readouterr() == ("", "")


def _fails(argv, capsys, code=1) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == code and err.count("\n") == 1, err
    return err


def test_use_cache_says_the_cache_is_not_pytree_registered(saved, tmp_path, capsys):
    err = _fails(["trace", "--hf", saved["gpt2"][0], "--use-cache", "-o", str(tmp_path / "g.tjit")], capsys)
    assert "DynamicCache" in err and "not pytree-registered" in err and "use_cache=False" in err
    assert not (tmp_path / "g.tjit").exists()


def test_bad_uses(saved, tmp_path, capsys):
    out = str(tmp_path / "x.tjit")
    assert "unknown task 'sumarize'" in _fails(["trace", "--hf", saved["bert"][0], "--task", "sumarize", "-o", out],
                                               capsys)
    err = _fails(["trace", "--hf", saved["vit"][0], "--task", "causal-lm", "-o", out], capsys)
    assert "ViTConfig cannot be loaded for task 'causal-lm'" in err
    assert "--hf" in _fails(["trace", "--hf", str(tmp_path / "missing"), "-o", out], capsys)
    assert "no MODULE:CALLABLE" in _fails(["trace", "m:f", "--hf", saved["bert"][0], "-o", out], capsys, 2)
    assert "MODULE:CALLABLE" in _fails(["trace", "-o", out], capsys, 2)
    assert "--task, --length, --no-check only go with --hf" in _fails(
        ["trace", "m:f", "--task", "causal-lm", "--length", "4", "--no-check", "-o", out], capsys, 2)
    assert "positive integer" in _fails(["trace", "--hf", saved["bert"][0], "--batch", "0", "-o", out], capsys, 2)
    assert not os.path.exists(out)


def test_a_terminal_gets_the_progress_bar(saved, tmp_path, capsys, monkeypatch):
    """stdout a terminal: the bar (tqdm, on stderr) is drawn, then the summary on stdout."""
    pytest.importorskip("tqdm")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    out = _trace_cli(saved["vit"][0], tmp_path / "t.tjit", capsys)
    assert "\r" in out.err and "█" in out.err and "trace" in out.err and "save" in out.err
    assert "checked:    equals eager transformers" in out.out and "█" not in out.out
