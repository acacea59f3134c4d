"""Trace a Hugging Face ``transformers`` model from a saved directory or a hub id.

    >>> from tracejit.hf import trace_pretrained
    >>> result = trace_pretrained("./my-bert")                       # doctest: +SKIP
    >>> tracejit.save(result.traced, "bert.tjit")                    # doctest: +SKIP
    >>> loaded = tracejit.load("bert.tjit")                          # doctest: +SKIP
    >>> loaded(input_ids=ids, attention_mask=mask)["last_hidden_state"]   # doctest: +SKIP

``trace_pretrained`` reads the config first (``AutoConfig``) to choose the task (from
``config.architectures`` unless given) and the example inputs, loads the model with the task's
Auto class in eval mode, traces it with keyword inputs (``strict=False``: the outputs are
ModelOutput dicts, traced with ``return_dict=True``; a loaded file returns the same class,
docs/API.md), then runs the traced program and eager transformers on OTHER inputs (batch 3,
length 13, the padding on another row) and on the shapes a server meets (batch 1 and many,
length 1 and many, padded) and raises ``PretrainedCheckError`` when they differ.

The inputs are the ones the model's tokenizer or processor returns that its forward accepts
(``input_ids, token_type_ids, attention_mask`` for BERT), or those named (hf_inputs.py, which
builds them from the config). Image sizes and audio frame counts are fixed by the model's
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

from .api import trace
from .errors import TraceError, TracerWarning
from .runtime import specialize
from .serialize.encode import dtype_name
from .hf_inputs import (build_inputs, forward_parameters, input_names, max_length, modality,  # noqa: F401
                        omittable_subsets, serving_shapes)

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
    modality: str                      # "text", "image" or "speech" (hf_inputs.modality of the forward)
    example: dict                      # input name -> tensor the trace saw
    checked: dict = field(default_factory=dict)   # input name -> tensor of the check (empty: not checked)
    check_note: str = ""               # why the check keeps some sizes
    max_abs_diff: float | None = None  # traced vs eager on ``checked``
    outputs: tuple = ()                # the output names
    served: list = field(default_factory=list)    # the serving shapes also checked (hf_inputs.serving_shapes)
    omitted: list = field(default_factory=list)   # input sets left out, also checked (hf_inputs.omittable_subsets)


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


def check_sizes(config, batch: int, length: int, kind: str | None = None) -> tuple[int, int, str]:
    """(batch, length, note) of the check: other sizes than the example's where the model allows.
    ``kind``: the model's modality (default: the config's, ``hf_inputs.modality``)."""
    check_batch = CHECK_BATCH if batch != CHECK_BATCH else CHECK_BATCH + 1
    check_length = CHECK_LENGTH if length != CHECK_LENGTH else CHECK_LENGTH + 2
    kind = kind or modality(config)
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
    import transformers   # optional dependency (pip install transformers): only `tracejit trace hf:...` needs it
    from transformers.utils import logging as hf_logging   # optional dependency, as above
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
                     check: bool = True, seed: int = 0, progress: Callable[[str], None] | None = None,
                     inputs: list[str] | None = None, serve: bool = True) -> PretrainedTrace:
    """Load ``path`` (a directory saved with ``save_pretrained``, or a hub id), trace it on example
    inputs built from its config and check it against eager on other sizes.

    ``progress(step)`` is called as each long step starts: ``"load"``, ``"trace"``, ``"check"``.
    Raises ``ValueError`` for a task or model it cannot handle, ``tracejit.TraceError`` when the
    model cannot be traced (with ``use_cache=True``: its DynamicCache), ``PretrainedCheckError``
    when the traced program and eager disagree.

    ``inputs`` names the keyword inputs (default: what the tokenizer or processor saved in ``path``
    returns that the forward accepts; hf_inputs.py). With ``check`` and ``serve``, the program is
    also run on the shapes a server meets (batch 1 and many, length 1 and many, padded;
    ``hf_inputs.serving_shapes``) and compared with eager on each: a guard that fails there makes a
    specialization of the live object (runtime/specialize.py), and ``tracejit.save`` writes every
    specialization, so the file serves those shapes with no GuardError.
    """
    step = progress or (lambda name: None)
    step("load")
    model, config, task = load_pretrained(os.fspath(path), task, use_cache)
    names = input_names(model, config, os.fspath(path), inputs)
    kind = modality(config, forward_parameters(model))   # the forward's inputs decide (BEiT: pixels, not tokens)
    example = build_inputs(config, batch, length, seed, names=names, kind=kind)
    step("trace")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)   # each one is in the ledger
        with torch.no_grad():
            try:
                traced = trace(model, example_kwarg_inputs=example, strict=False, check_trace=False)
            except TraceError as e:
                if use_cache and "Cache" in str(e):
                    raise TraceError(
                        "use_cache=True: the model passes a transformers DynamicCache, which is not pytree-registered, "
                        "so tracejit cannot trace the tensors inside it; trace without the cache "
                        f"(use_cache=False) or register the cache class with torch.utils._pytree. ({e})") from None
                raise
    result = PretrainedTrace(traced, task, type(model).__name__, kind, example)
    if check:
        step("check")
        _check(result, model, config, batch, length, seed, names)
        if serve:
            shapes = serving_shapes(config, batch, length, kind)
            _make_room(result.traced, (1 + len(omittable_subsets(model, names))) * (1 + len(shapes)))
            for i, (b, n, *dec) in enumerate(shapes):
                served = build_inputs(config, b, n, seed + 2 + i, padded_row=0, names=names,
                                      decoder_length=dec[0] if dec else None, kind=kind)
                _compare(result, model, served)
                result.served.append(served)
            _serve_omitted(result, model, config, [(batch, length)] + shapes, seed, names)
    return result


def _make_room(traced, n: int) -> None:
    """Let the live object keep ``n`` specializations: one per kind of call the file is to serve
    (a live object drops the least recently used beyond runtime/specialize.py's LIMIT)."""
    spec_set = specialize.sets_of(traced).get("forward")
    if spec_set is not None:
        spec_set.limit = max(spec_set.limit, n)


def _serve_omitted(result: PretrainedTrace, model, config, shapes: list, seed: int, names: list) -> None:
    """A caller may leave out an input the forward has a default for (a tokenizer that returns no
    ``token_type_ids``): each such set, at every shape, is compared with eager, which makes the
    specializations traced without it (runtime/omitted_inputs.py) that the file then holds."""
    for subset in omittable_subsets(model, names):
        kept = [n for n in names if n not in subset]
        for i, (b, n, *dec) in enumerate(shapes):
            _compare(result, model, build_inputs(config, b, n, seed + 40 + i, padded_row=0, names=kept,
                                                 decoder_length=dec[0] if dec else None, kind=result.modality))
        result.omitted.append(subset)


def _check(result: PretrainedTrace, model, config, batch: int, length: int, seed: int, names: list) -> None:
    check_batch, check_length, note = check_sizes(config, batch, length, result.modality)
    inputs = build_inputs(config, check_batch, check_length, seed + 1, padded_row=0, names=names,
                          kind=result.modality)
    names, worst = _compare(result, model, inputs)
    result.checked, result.check_note, result.max_abs_diff, result.outputs = inputs, note, worst, tuple(names)


def _compare(result: PretrainedTrace, model, inputs: dict) -> tuple[list, float]:
    """Run the traced program and eager on ``inputs`` (a failed guard retraces in memory); the output
    names and the largest difference, or PretrainedCheckError."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)   # a retrace for another shape says so
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
    result.max_abs_diff = max(result.max_abs_diff or 0.0, worst)
    return names, worst


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
    return ", ".join(f"{k}: {dtype_name(v.dtype)}[{', '.join(str(s) for s in v.shape)}]" for k, v in inputs.items())
