"""The real-model corpus: model specs, building, tracing and the checks every model goes through.

Each model is a small ``transformers`` model built from its config class with tiny sizes and
random weights (nothing is downloaded). It is called through a wrapper ``nn.Module``
(``CallWith``) that passes ``return_dict=False`` / ``use_cache=False`` and returns a tuple of
tensors only.

A ``Spec`` names the model, how to build it, its example inputs (what the trace sees), its ALT
inputs (other values, batch sizes, sequence lengths / image sizes and, for text models, right
padding in the attention mask; the example masks are all ones, so a trace that baked "no
padding" in would fail on them), its perturbations (example-shaped inputs with one thing
changed, for the sensitivity check) and the size specializations expected in the model's own
modeling file.

``traced_case(name)`` builds and traces a model once per session (cached), so every test of a
model shares one trace. The ``check_*`` functions are the tests' bodies; the test files call
them for their models (conftest.py parametrizes ``model`` / ``alt`` / ``specialization`` from
each test module's ``MODELS``).
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import transformers
from torch import nn

import tracejit

TOL = dict(rtol=1e-4, atol=1e-4)
# An output must move by more than this when an input changes, so an equality test at TOL
# cannot pass trivially (e.g. a model that outputs (nearly) a constant).
SENSITIVITY = 100 * TOL["atol"]

TRANSFORMERS_DIR = os.path.dirname(os.path.realpath(transformers.__file__))
WARN_KINDS = ("value_read", "iteration", "size", "constant", "autograd_function")


# ============================================================================= wrappers
class LastHidden(nn.Module):
    """A transformers base model's ``last_hidden_state`` alone (the model called with positional inputs)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        return self.model(*args).last_hidden_state


class CallWith(nn.Module):
    """Calls ``model`` with its inputs as keyword arguments plus fixed options; returns tensors only.

    ``names``: the keyword for each positional input; ``keep``: which outputs of the
    ``return_dict=False`` tuple to return.
    """

    def __init__(self, model: nn.Module, names: tuple[str, ...], options: dict, keep: tuple[int, ...]):
        super().__init__()
        self.model = model
        self.names = names
        self.options = options
        self.keep = keep

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.names, inputs)), **self.options)
        return tuple(out[i] for i in self.keep)


# ============================================================================= specs
@dataclass
class Spec:
    name: str
    build: Callable[[], nn.Module]           # returns the wrapper, in eval mode
    inputs: Callable[[], dict]               # {"example": (...), "<alt>": (...), ...}
    alts: tuple[str, ...]                    # names of the ALT input sets
    perturbations: Callable[[dict], dict]    # example inputs -> {"what changed": inputs}
    modeling_module: str                     # e.g. "transformers.models.bert.modeling_bert"
    # {key: (source text of the line, what the trace fixed)} for each size specialization expected
    # in the model's own modeling file: exactly these must be warned about and be in the ledger.
    specializations: dict = field(default_factory=dict)
    # {test function name: reason} for the tests of this model that fail because of a tracejit bug
    # (conftest.py marks them xfail(strict=True)).
    known_bugs: dict = field(default_factory=dict)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def text_batch(g, batch: int, length: int, lengths=None, vocab: int = 100):
    """(input_ids, attention_mask); ``lengths`` right-pads row i after lengths[i] tokens."""
    ids = torch.randint(3, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for row, n in enumerate(lengths or ()):
        mask[row, n:] = 0
    return ids, mask


def right_pad_row0(mask: torch.Tensor, n: int = 3) -> torch.Tensor:
    mask = mask.clone()
    mask[0, -n:] = 0
    return mask


# ---------------------------------------------------------------------------- text (encoder / decoder-only)
# initializer_range / init_std 0.2 (default 0.02): with the default, attention is nearly uniform and
# masking a few positions barely moves the output, so the mask would hardly be tested.
def _text_inputs(seed: int):
    def make():
        g = _gen(seed)
        return {
            "example": text_batch(g, 2, 8),                         # all-ones mask
            "longer_padded": text_batch(g, 3, 13, [13, 9, 5]),
            "shorter_padded": text_batch(g, 2, 5, [5, 2]),
        }
    return make


def _text_perturbations(seed: int):
    def make(example):
        ids, mask = example
        g = _gen(seed + 1)
        return {
            "input_ids": (torch.randint(3, 100, ids.shape, generator=g), mask),
            "attention_mask": (ids, right_pad_row0(mask)),
        }
    return make


def build_bert(attn: str):
    def build():
        cfg = transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, pad_token_id=0, initializer_range=0.2, attn_implementation=attn)
        model = transformers.BertModel(cfg)
        # (last_hidden_state, pooler_output)
        return CallWith(model, ("input_ids", "attention_mask"), {"return_dict": False}, (0, 1))
    return build


def build_gpt2():
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  bos_token_id=1, eos_token_id=2, initializer_range=0.2)
    model = transformers.GPT2LMHeadModel(cfg)
    return CallWith(model, ("input_ids", "attention_mask"), {"return_dict": False, "use_cache": False}, (0,))


def build_llama(attn: str):
    def build():
        cfg = transformers.LlamaConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            initializer_range=0.2, attn_implementation=attn)
        model = transformers.LlamaForCausalLM(cfg)
        return CallWith(model, ("input_ids", "attention_mask"), {"return_dict": False, "use_cache": False}, (0,))
    return build


# ---------------------------------------------------------------------------- seq2seq
def build_t5():
    cfg = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                num_heads=4, relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1,
                                decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(cfg)
    # (logits, encoder_last_hidden_state)
    return CallWith(model, ("input_ids", "attention_mask", "decoder_input_ids"),
                    {"return_dict": False, "use_cache": False}, (0, 1))


def _t5_inputs():
    g = _gen(300)

    def batch(b, enc_len, dec_len, lengths=None):
        return text_batch(g, b, enc_len, lengths) + (torch.randint(3, 100, (b, dec_len), generator=g),)
    return {
        "example": batch(2, 8, 6),
        "longer_padded": batch(3, 13, 10, [13, 9, 5]),
        "shorter_padded": batch(2, 5, 3, [5, 2]),
    }


def _t5_perturbations(example):
    ids, mask, dec = example
    g = _gen(301)
    return {
        "input_ids": (torch.randint(3, 100, ids.shape, generator=g), mask, dec),
        "attention_mask": (ids, right_pad_row0(mask), dec),
        "decoder_input_ids": (ids, mask, torch.randint(3, 100, dec.shape, generator=g)),
    }


WHISPER_MEL_BINS = 16
WHISPER_SOURCE_POSITIONS = 16
WHISPER_FRAMES = 2 * WHISPER_SOURCE_POSITIONS   # the encoder's two convs: stride 1 then stride 2


def build_whisper():
    cfg = transformers.WhisperConfig(
        vocab_size=100, num_mel_bins=WHISPER_MEL_BINS, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=WHISPER_SOURCE_POSITIONS, max_target_positions=32, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=1, suppress_tokens=None, begin_suppress_tokens=None, init_std=0.2)
    model = transformers.WhisperForConditionalGeneration(cfg)
    # (logits, encoder_last_hidden_state)
    return CallWith(model, ("input_features", "decoder_input_ids"), {"return_dict": False, "use_cache": False},
                    (0, 1))


def _whisper_inputs():
    g = _gen(400)

    def batch(b, dec_len):
        return (torch.randn(b, WHISPER_MEL_BINS, WHISPER_FRAMES, generator=g),
                torch.randint(3, 100, (b, dec_len), generator=g))
    # The frame count is fixed by the model (it raises on any other length), so the ALT inputs
    # change the batch size and the decoder length only.
    return {"example": batch(2, 8), "longer": batch(3, 13), "shorter": batch(1, 3)}


def _whisper_perturbations(example):
    feats, dec = example
    g = _gen(401)
    return {
        "input_features": (torch.randn(feats.shape, generator=g), dec),
        "decoder_input_ids": (feats, torch.randint(3, 100, dec.shape, generator=g)),
    }


# ---------------------------------------------------------------------------- vision
def build_vit(interpolate: bool):
    def build():
        cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, image_size=32, patch_size=8, num_channels=3)
        model = transformers.ViTModel(cfg)
        options = {"return_dict": False}
        if interpolate:
            options["interpolate_pos_encoding"] = True
        # (last_hidden_state, pooler_output)
        return CallWith(model, ("pixel_values",), options, (0, 1))
    return build


def _images(seed: int, shapes: dict):
    def make():
        g = _gen(seed)
        return {name: (torch.randn(*shape, generator=g),) for name, shape in shapes.items()}
    return make


def _image_perturbations(seed: int):
    def make(example):
        return {"pixel_values": (torch.randn(example[0].shape, generator=_gen(seed)),)}
    return make


def build_resnet():
    cfg = transformers.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                    layer_type="basic")
    model = transformers.ResNetModel(cfg)
    # transformers' init can make a deep conv net output almost nothing: He-normal convs and
    # BatchNorm statistics calibrated on random data.
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_in", nonlinearity="relu")
        elif isinstance(mod, nn.BatchNorm2d):
            mod.reset_running_stats()
            mod.momentum = None   # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        g = _gen(600)
        for _ in range(4):
            model(pixel_values=torch.randn(8, 3, 32, 32, generator=g))
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = 0.1
    # (last_hidden_state, pooler_output)
    return CallWith(model, ("pixel_values",), {"return_dict": False}, (0, 1))


# ---------------------------------------------------------------------------- registry
_CHANNELS_CHECK = {"channels": ("if num_channels != self.num_channels:",
                                 "the channel count (fixed by the first conv's weight anyway)")}

SPECS: dict[str, Spec] = {s.name: s for s in [
    Spec("bert", build_bert("sdpa"), _text_inputs(100), ("longer_padded", "shorter_padded"),
         _text_perturbations(100), "transformers.models.bert.modeling_bert"),
    Spec("bert_eager_attn", build_bert("eager"), _text_inputs(110), ("longer_padded", "shorter_padded"),
         _text_perturbations(110), "transformers.models.bert.modeling_bert"),
    Spec("gpt2", build_gpt2, _text_inputs(200), ("longer_padded", "shorter_padded"),
         _text_perturbations(200), "transformers.models.gpt2.modeling_gpt2",
         {"qkv_split": ("query_states, key_states, value_states = self.c_attn(hidden_states).split(",
                        "the number of pieces of the fused QKV split (3, fixed by c_attn's weight)")}),
    Spec("llama", build_llama("sdpa"), _text_inputs(500), ("longer_padded", "shorter_padded"),
         _text_perturbations(500), "transformers.models.llama.modeling_llama"),
    Spec("llama_eager_attn", build_llama("eager"), _text_inputs(510), ("longer_padded", "shorter_padded"),
         _text_perturbations(510), "transformers.models.llama.modeling_llama"),
    Spec("t5", build_t5, _t5_inputs, ("longer_padded", "shorter_padded"), _t5_perturbations,
         "transformers.models.t5.modeling_t5"),
    Spec("whisper", build_whisper, _whisper_inputs, ("longer", "shorter"), _whisper_perturbations,
         "transformers.models.whisper.modeling_whisper",
         {"frames": ("if input_features.shape[-1] != expected_seq_length:",
                     "the mel frame count check (2 * max_source_positions)")}),
    Spec("vit", build_vit(False), _images(700, {"example": (2, 3, 32, 32), "batch3": (3, 3, 32, 32),
                                                "batch1": (1, 3, 32, 32)}),
         ("batch3", "batch1"), _image_perturbations(701), "transformers.models.vit.modeling_vit",
         {**_CHANNELS_CHECK,
          "image_size": ("if height != self.image_size[0] or width != self.image_size[1]:",
                         "the image size check (height and width must equal config.image_size)")}),
    Spec("vit_interpolate", build_vit(True), _images(710, {"example": (2, 3, 32, 32), "larger": (3, 3, 48, 48),
                                                           "nonsquare": (1, 3, 40, 56)}),
         ("larger", "nonsquare"), _image_perturbations(711), "transformers.models.vit.modeling_vit",
         _CHANNELS_CHECK),
    Spec("resnet", build_resnet, _images(800, {"example": (2, 3, 32, 32), "larger": (3, 3, 64, 64),
                                               "nonsquare": (1, 3, 48, 40)}),
         ("larger", "nonsquare"), _image_perturbations(801), "transformers.models.resnet.modeling_resnet",
         _CHANNELS_CHECK),
]}


# ============================================================================= building and tracing
@dataclass
class Case:
    spec: Spec
    wrapper: nn.Module
    inputs: dict
    traced: object = None
    warnings: list = field(default_factory=list)   # TracerWarning records from tracing
    trace_seconds: float = 0.0
    _eager: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def example(self):
        return self.inputs["example"]

    def eager(self, input_name: str):
        """Eager outputs on a named input set (cached)."""
        if input_name not in self._eager:
            self._eager[input_name] = run(self.wrapper, self.inputs[input_name])
        return self._eager[input_name]


def run(fn, inputs) -> tuple:
    with torch.no_grad():
        out = fn(*inputs)
    return out if isinstance(out, tuple) else (out,)


def max_abs_diff(a: tuple, b: tuple) -> float:
    assert len(a) == len(b)
    return max((x.float() - y.float()).abs().max().item() if x.shape == y.shape else float("inf")
               for x, y in zip(a, b))


def assert_outputs_equal(actual: tuple, expected: tuple, what: str = "") -> None:
    assert isinstance(actual, tuple) and len(actual) == len(expected), (what, type(actual), len(actual))
    for i, (x, y) in enumerate(zip(actual, expected)):
        assert torch.isfinite(y).all(), f"{what}: eager output {i} is not finite"
        torch.testing.assert_close(x, y, **TOL, msg=lambda m, i=i: f"{what}: output {i}: {m}")


@functools.cache
def built_case(name: str) -> Case:
    """The model, built with a fixed seed, in eval mode, with its inputs (not traced)."""
    spec = SPECS[name]
    torch.manual_seed(sum(map(ord, name)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapper = spec.build().eval()
    return Case(spec, wrapper, spec.inputs())


@functools.cache
def traced_case(name: str) -> Case:
    """The model traced once per session: under no_grad, check_trace on (the default)."""
    case = built_case(name)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        case.traced = tracejit.trace(case.wrapper, case.example)
        case.trace_seconds = time.perf_counter() - start
    case.warnings = [w for w in caught if issubclass(w.category, tracejit.TracerWarning)]
    return case


def assert_backend_gives_eager_answers(name: str, backend: str) -> None:
    """optimize_for_inference(backend=...) on the traced corpus model matches eager on every alt input."""
    case = traced_case(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)   # unchecked size guards: tested in test_onnx_export
        program = tracejit.optimize_for_inference(case.traced, backend=backend)
    for alt in case.spec.alts:
        assert_outputs_equal(run(program, case.inputs[alt]), case.eager(alt), f"{name}/{alt} {backend} backend")


def source_line(module_name: str, text: str) -> tuple[str, int]:
    """(real path, 1-based line) of the single line of a module's source containing ``text``."""
    module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
    path = os.path.realpath(inspect.getsourcefile(module))
    with open(path, encoding="utf-8") as fh:
        hits = [i + 1 for i, line in enumerate(fh) if text in line]
    assert len(hits) == 1, f"{text!r} found {len(hits)} times in {path}"
    return path, hits[0]


def same_file(a: str | None, b: str) -> bool:
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


def flatten_groups(groups: dict) -> dict:
    """{input set: tuple of tensors} -> flat safetensors dict {"<set>::<i>": tensor}."""
    return {f"{g}::{i}": t.contiguous() for g, ts in groups.items() for i, t in enumerate(ts)}


def unflatten_groups(tensors: dict) -> dict:
    groups: dict = {}
    for key, t in tensors.items():
        group, index = key.split("::")
        groups.setdefault(group, {})[int(index)] = t
    return {g: tuple(items[i] for i in range(len(items))) for g, items in groups.items()}


# ============================================================================= the checks
def check_sensitivity(model: str) -> None:
    """Eager's outputs move far beyond the tolerance when one input (values, mask, ...) changes."""
    case = built_case(model)
    base = case.eager("example")
    assert all(torch.isfinite(t).all() for t in base)
    for what, inputs in case.spec.perturbations(case.example).items():
        for a, b in zip(inputs, case.example):
            assert a.shape == b.shape
        diff = max_abs_diff(run(case.wrapper, inputs), base)
        assert diff > SENSITIVITY, f"{model}: changing {what} moves the output by only {diff:.3g}"


def check_example(model: str) -> None:
    case = traced_case(model)
    assert isinstance(case.traced, tracejit.TracedModule)
    assert_outputs_equal(run(case.traced, case.example), case.eager("example"), f"{model} on example")


def check_alt(model: str, alt: str) -> None:
    case = traced_case(model)
    inputs = case.inputs[alt]
    # The ALT inputs really are other shapes than the example's.
    assert [t.shape for t in inputs] != [t.shape for t in case.example]
    expected = case.eager(alt)
    assert expected[0].shape != case.eager("example")[0].shape
    assert_outputs_equal(run(case.traced, inputs), expected, f"{model} on {alt}")


def check_warnings_and_ledger(model: str) -> None:
    """Each TracerWarning points at a transformers source line and has its ledger entry; nothing was
    read out of a tensor or captured as a constant; the size specializations in the model's own
    modeling file are exactly the expected ones."""
    case = traced_case(model)
    ledger = case.traced.ledger
    assert all(isinstance(e, tracejit.LedgerEntry) for e in ledger)
    assert [e.value for e in ledger if e.kind == "training"] == [False]
    for w in case.warnings:
        assert os.path.realpath(w.filename).startswith(TRANSFORMERS_DIR + os.sep), (w.filename, str(w.message))
        assert any(same_file(e.filename, w.filename) and e.lineno == w.lineno and e.kind in WARN_KINDS
                   and str(w.message).startswith(e.message) for e in ledger), f"no ledger entry for {w}"
    for e in ledger:
        if e.kind in WARN_KINDS:
            assert any(same_file(w.filename, e.filename) and w.lineno == e.lineno for w in case.warnings), \
                f"ledger entry without a warning: {e}"
    frozen = [str(e) for e in ledger if e.kind in ("value_read", "iteration", "constant", "autograd_function")]
    assert frozen == [], frozen
    own_file = os.path.realpath(inspect.getsourcefile(sys.modules[case.spec.modeling_module]))
    seen = {e.lineno for e in ledger if e.kind == "size" and same_file(e.filename, own_file)}
    expected = {source_line(case.spec.modeling_module, text)[1] for text, _ in case.spec.specializations.values()}
    assert seen == expected, f"size specializations in {own_file}: {sorted(seen)}, expected {sorted(expected)}"


def check_specialization(model: str, key: str) -> tuple:
    """The trace warned (TracerWarning) at the model's source line of specialization ``key`` and its
    ledger holds a ``size`` entry for it; returns (warning, ledger entry)."""
    case = traced_case(model)
    text = case.spec.specializations[key][0]
    path, line = source_line(case.spec.modeling_module, text)
    warned = [w for w in case.warnings if same_file(w.filename, path) and w.lineno == line]
    assert warned, f"no TracerWarning at {path}:{line}; got {[(w.filename, w.lineno) for w in case.warnings]}"
    entries = [e for e in case.traced.ledger if e.kind == "size" and same_file(e.filename, path) and e.lineno == line]
    assert entries, f"no ledger entry at {path}:{line}"
    assert "it may be wrong for other inputs" in str(warned[0].message)
    return warned[0], entries[0]


def check_fresh_process(model: str, fresh: dict) -> None:
    case = traced_case(model)
    assert fresh["report"][model] == "TracedModule"
    # Loading ran no model code: the fresh process never imported transformers.
    assert fresh["report"]["__transformers_imported__"] is False
    outputs = fresh["models"][model]
    assert set(outputs) == {"example", *case.spec.alts}
    for name, got in outputs.items():
        assert_outputs_equal(got, case.eager(name), f"{model} loaded in a fresh process, on {name}")


def check_gradients(model: str) -> None:
    """Called with grad enabled (it was traced under no_grad), the trace gives eager's outputs and
    eager's parameter gradients on an ALT input set."""
    case = traced_case(model)
    inputs = case.inputs[case.spec.alts[0]]
    params = dict(case.wrapper.named_parameters())

    def grads(fn):
        for p in params.values():
            p.grad = None
        out = fn(*inputs)
        out = out if isinstance(out, tuple) else (out,)
        sum(o.square().mean() for o in out).backward()
        got = {n: p.grad for n, p in params.items() if p.grad is not None}
        for p in params.values():
            p.grad = None
        return tuple(o.detach() for o in out), got

    with torch.enable_grad():
        out_e, grad_e = grads(case.wrapper)
        out_t, grad_t = grads(case.traced)
    assert_outputs_equal(out_t, out_e, f"{model} with grad enabled")
    assert grad_e and set(grad_t) == set(grad_e)
    for n in grad_e:
        torch.testing.assert_close(grad_t[n], grad_e[n], **TOL, msg=lambda m, n=n: f"{model}: grad of {n}: {m}")


def check_fresh_process_graph_and_ledger(model: str, fresh: dict) -> None:
    """The model loaded in the fresh process has the traced model's inlined graph and ledger."""
    case = traced_case(model)
    got = fresh["graphs"][model]
    # a file keeps no guard on Python state (global guards: module globals, config objects: trace/global_reads.py)
    traced = "".join(line for line in str(case.traced.inlined_graph).splitlines(keepends=True)
                     if "kind='global'" not in line)
    assert got["inlined_graph"] == traced
    assert got["ledger"] == [[e.kind, e.message, e.filename, e.lineno, repr(e.value)] for e in case.traced.ledger]
