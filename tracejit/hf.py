"""Trace a Hugging Face ``transformers`` model from a saved directory or a hub id.

    >>> from tracejit.hf import trace_pretrained
    >>> result = trace_pretrained("./my-bert")                       # doctest: +SKIP
    >>> tracejit.save(result.traced, "bert.tjit")                    # doctest: +SKIP
    >>> loaded = tracejit.load("bert.tjit")                          # doctest: +SKIP
    >>> loaded(input_ids=ids, attention_mask=mask)["last_hidden_state"]   # doctest: +SKIP

``trace_pretrained`` reads the config first (``AutoConfig``) to choose the task (from
``config.architectures`` unless given) and the example inputs, loads the model with the task's
Auto class in eval mode, traces it with keyword inputs (``strict=False``: the outputs are
ModelOutput dicts, traced with ``return_dict=True`` and saved as plain dicts of tensors), then
runs the traced program and eager transformers on OTHER inputs (batch 3, length 13, the padding
on another row) and raises ``PretrainedCheckError`` when they differ.

Example inputs are built from the config: ``input_ids`` in ``[0, vocab_size)`` with an
``attention_mask`` that pads the end of the last row; ``pixel_values`` of
``config.image_size`` and ``config.num_channels``; for speech (Whisper) ``input_features`` of
``config.num_mel_bins`` x ``2 * config.max_source_positions`` frames. Encoder-decoder models
also get ``decoder_input_ids``. Image sizes and audio frame counts are fixed by the model's
position embeddings (ViT and Whisper raise on any other size), so their check changes the batch
size (and the decoder length) only.

Decoders run without a cache (``use_cache=False``) unless asked: a transformers cache object
(DynamicCache) is not pytree-registered, so tracejit cannot trace it and says so.
tracejit never calls torch.jit here either; the network is touched only by transformers itself,
when ``path`` is a hub id and the hub is reachable.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

# task -> the transformers Auto class that loads it
TASKS = {
    "feature-extraction": "AutoModel",
    "text-classification": "AutoModelForSequenceClassification",
    "causal-lm": "AutoModelForCausalLM",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
    "speech": "AutoModelForSpeechSeq2Seq",
}
ALIASES = {"vision": "feature-extraction", "text-generation": "causal-lm", "speech-seq2seq": "speech",
           "text2text-generation": "seq2seq"}
# the end of an architecture name (config.architectures) -> its task; the first match wins
_ARCHITECTURE_SUFFIXES = (
    ("ForCausalLM", "causal-lm"), ("LMHeadModel", "causal-lm"),
    ("ForSequenceClassification", "text-classification"),
    ("ForImageClassification", "image-classification"),
    ("ForSpeechSeq2Seq", "speech"),
    ("ForConditionalGeneration", "seq2seq"),   # speech when the config has mel bins (Whisper)
    ("ForSeq2SeqLM", "seq2seq"),
    ("Model", "feature-extraction"),
)
TOLERANCE = dict(rtol=1e-4, atol=1e-4)
CHECK_BATCH, CHECK_LENGTH = 3, 13


class PretrainedCheckError(RuntimeError):
    """The traced program and eager transformers disagree on the check inputs."""


@dataclass
class PretrainedTrace:
    """What ``trace_pretrained`` did: the traced program and how it was made and checked."""

    traced: object
    task: str
    model_class: str
    modality: str                      # "text", "image" or "speech"
    example: dict                      # input name -> tensor the trace saw
    checked: dict = field(default_factory=dict)   # input name -> tensor of the check (empty: not checked)
    check_note: str = ""               # why the check keeps some sizes
    max_abs_diff: float | None = None  # traced vs eager on ``checked``
    outputs: tuple = ()                # the output names


def infer_task(config) -> str:
    """The task of ``config.architectures[0]`` (``BertForSequenceClassification`` ->
    ``text-classification``); ``feature-extraction`` without architectures."""
    archs = list(getattr(config, "architectures", None) or [])
    if not archs:
        return "speech" if modality(config) == "speech" and config.is_encoder_decoder else "feature-extraction"
    arch = archs[0]
    for suffix, task in _ARCHITECTURE_SUFFIXES:
        if arch.endswith(suffix):
            if task == "seq2seq" and modality(config) == "speech":
                return "speech"
            return task
    raise ValueError(f"cannot tell the task of architecture {arch!r} (config.architectures); pass one of "
                     f"--task {', '.join(TASKS)}")


def resolve_task(task: str | None, config) -> str:
    if task is None:
        return infer_task(config)
    name = ALIASES.get(task, task)
    if name not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)} "
                         f"(or {', '.join(ALIASES)})")
    return name


def modality(config) -> str:
    """``speech`` (mel-bin input features), ``image`` (pixel values) or ``text`` (token ids)."""
    if getattr(config, "num_mel_bins", None):
        return "speech"
    if getattr(config, "vocab_size", None) is None and getattr(config, "image_size", None):
        return "image"
    if getattr(config, "vocab_size", None) is None:
        raise ValueError(f"cannot build example inputs for a {type(config).__name__}: it has no vocab_size (text), "
                         "image_size (vision) or num_mel_bins (speech)")
    return "text"


def max_length(config, decoder: bool = False) -> int | None:
    """The longest token sequence the model's position embeddings take (None: unbounded)."""
    names = ("max_target_positions",) if decoder else ()
    names += ("max_position_embeddings", "n_positions", "max_target_positions")
    for name in names:
        n = getattr(config, name, None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def build_inputs(config, batch: int, length: int, seed: int = 0, padded_row: int = -1) -> dict:
    """Example inputs for ``config``'s model: name -> tensor (see the module docstring)."""
    if batch < 1 or length < 1:
        raise ValueError(f"batch and length must be at least 1; got batch={batch}, length={length}")
    g = torch.Generator().manual_seed(seed)
    kind = modality(config)
    inputs = {}
    if kind == "text":
        inputs["input_ids"] = _token_ids(config, g, batch, _cap(length, max_length(config)))
        mask = torch.ones_like(inputs["input_ids"])
        n = inputs["input_ids"].shape[1]
        if n > 1:   # pad the end of one row: a trace that baked "no padding" in fails the check
            mask[padded_row, n - min(3, n - 1):] = 0
        inputs["attention_mask"] = mask
    elif kind == "image":
        size = config.image_size
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        inputs["pixel_values"] = torch.randn(batch, getattr(config, "num_channels", 3), h, w, generator=g)
    else:
        frames = 2 * config.max_source_positions   # the encoder's convs: stride 1, then stride 2
        inputs["input_features"] = torch.randn(batch, config.num_mel_bins, frames, generator=g)
    if getattr(config, "is_encoder_decoder", False):
        dec = _cap(length if kind != "text" else max(1, length - 2), max_length(config, decoder=True))
        inputs["decoder_input_ids"] = _token_ids(config, g, batch, dec)
    return inputs


def _token_ids(config, g, batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (batch, length), generator=g)


def _cap(n: int, limit: int | None) -> int:
    return n if limit is None else min(n, limit)


def check_sizes(config, batch: int, length: int) -> tuple[int, int, str]:
    """(batch, length, note) of the check: other sizes than the example's where the model allows."""
    check_batch = CHECK_BATCH if batch != CHECK_BATCH else CHECK_BATCH + 1
    check_length = CHECK_LENGTH if length != CHECK_LENGTH else CHECK_LENGTH + 2
    kind = modality(config)
    limit = max_length(config, decoder=kind != "text")
    note = ""
    if kind == "image":
        note = "the image size is the model's (its position embeddings fix it); the batch size changes"
    elif kind == "speech":
        note = ("the frame count is the model's (2 x max_source_positions; Whisper raises on any other); the batch "
                "size and the decoder length change")
    if limit is not None and check_length > limit:
        check_length = max(1, min(limit, length - 1 if length > 1 else 1))
        note = (note + "; " if note else "") + f"the check length is capped by the model's {limit} positions"
    return check_batch, check_length, note


def load_pretrained(path: str, task: str | None = None, use_cache: bool = False):
    """``(model, config, task)``: the model in eval mode, set for ``return_dict=True`` and the cache choice."""
    import transformers
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()   # the caller shows its own progress (the CLI: only on a terminal)
    config = transformers.AutoConfig.from_pretrained(path)
    task = resolve_task(task, config)
    modality(config)   # fails early, with what is missing, for a model we cannot feed
    auto = getattr(transformers, TASKS[task])
    config.return_dict = True
    if hasattr(config, "use_cache"):   # before the model is built: submodules copy the config (T5's stacks)
        config.use_cache = use_cache
    try:
        model = auto.from_pretrained(path, config=config)
    except ValueError as e:   # "Unrecognized configuration class ... for this kind of AutoModel"
        raise ValueError(f"{path}: a {type(config).__name__} cannot be loaded for task {task!r} "
                         f"({TASKS[task]}): {str(e).splitlines()[0]}") from None
    model.eval()
    for module in model.modules():   # configs copied into submodules, and the generation config
        for cfg in (getattr(module, "config", None), getattr(module, "generation_config", None)):
            if cfg is not None and getattr(cfg, "use_cache", None) is not None:
                cfg.use_cache = use_cache
    return model, model.config, task


def trace_pretrained(path, task: str | None = None, *, batch: int = 2, length: int = 8, use_cache: bool = False,
                     check: bool = True, seed: int = 0, progress: Callable[[str], None] | None = None
                     ) -> PretrainedTrace:
    """Load ``path`` (a directory saved with ``save_pretrained``, or a hub id), trace it on example
    inputs built from its config and check it against eager on other sizes.

    ``progress(step)`` is called as each long step starts: ``"load"``, ``"trace"``, ``"check"``.
    Raises ``ValueError`` for a task or model it cannot handle, ``tracejit.TraceError`` when the
    model cannot be traced (with ``use_cache=True``: its DynamicCache), ``PretrainedCheckError``
    when the traced program and eager disagree.
    """
    import tracejit
    step = progress or (lambda name: None)
    step("load")
    model, config, task = load_pretrained(os.fspath(path), task, use_cache)
    example = build_inputs(config, batch, length, seed)
    step("trace")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracejit.TracerWarning)   # each one is in the ledger
        with torch.no_grad():
            try:
                traced = tracejit.trace(model, example_kwarg_inputs=example, strict=False, check_trace=False)
            except tracejit.TraceError as e:
                if use_cache and "Cache" in str(e):
                    raise tracejit.TraceError(
                        "use_cache=True: the model passes a transformers DynamicCache, which is not pytree-registered, "
                        "so tracejit cannot trace the tensors inside it; trace without the cache "
                        f"(use_cache=False) or register the cache class with torch.utils._pytree. ({e})") from None
                raise
    result = PretrainedTrace(traced, task, type(model).__name__, modality(config), example)
    if check:
        step("check")
        _check(result, model, config, batch, length, seed)
    return result


def _check(result: PretrainedTrace, model, config, batch: int, length: int, seed: int) -> None:
    check_batch, check_length, note = check_sizes(config, batch, length)
    inputs = build_inputs(config, check_batch, check_length, seed + 1, padded_row=0)
    with torch.no_grad():
        expected = model(**inputs)
        actual = result.traced(**inputs)
    names, exp = _named_leaves(expected)
    got_names, got = _named_leaves(actual)
    if names != got_names:
        raise PretrainedCheckError(f"the traced program returns {got_names}, eager {names} "
                                   f"(on {describe_inputs(inputs)})")
    worst = 0.0
    for name, a, b in zip(names, got, exp):
        if a.shape != b.shape:
            raise PretrainedCheckError(f"output {name!r}: traced shape {list(a.shape)}, eager {list(b.shape)} "
                                       f"(on {describe_inputs(inputs)})")
        diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        worst = max(worst, diff)
        if not torch.allclose(a.double(), b.double(), **TOLERANCE):
            raise PretrainedCheckError(f"output {name!r} differs from eager by up to {diff:.3g} "
                                       f"(tolerance {TOLERANCE['atol']}) on {describe_inputs(inputs)}")
    result.checked, result.check_note, result.max_abs_diff, result.outputs = inputs, note, worst, tuple(names)


def _named_leaves(out, prefix: str = "") -> tuple[list, list]:
    """Output tensors by name: a ModelOutput / dict by key, a tuple by index; None entries skipped."""
    names, tensors = [], []
    if isinstance(out, torch.Tensor):
        return [prefix or "output"], [out]
    items = out.items() if hasattr(out, "items") else enumerate(out) if isinstance(out, (tuple, list)) else ()
    for k, v in items:
        if v is None:
            continue
        n, t = _named_leaves(v, f"{prefix}.{k}" if prefix else str(k))
        names += n
        tensors += t
    return names, tensors


def describe_inputs(inputs: dict) -> str:
    """``input_ids: int64[3, 13], attention_mask: int64[3, 13]``."""
    from .serialize.encode import dtype_name
    return ", ".join(f"{k}: {dtype_name(v.dtype)}[{', '.join(str(s) for s in v.shape)}]" for k, v in inputs.items())
