"""Which inputs a traced transformers model takes, example tensors for them, and the shapes a server meets.

The inputs are those the model's tokenizer or processor returns (``model_input_names``: BERT's
``input_ids, token_type_ids, attention_mask``; ViT's ``pixel_values``) that its ``forward``
accepts, in the tokenizer's order, plus ``decoder_input_ids`` for an encoder-decoder; without a
tokenizer in the directory, the modality's defaults (``input_ids, attention_mask`` /
``pixel_values`` / ``input_features``). ``--inputs a,b`` names them instead.

Example tensors: ``input_ids`` in ``[0, vocab_size)``, an ``attention_mask`` that pads the end of
one row, ``token_type_ids`` in ``[0, type_vocab_size)`` (so a trace that froze "all zeros" fails
the check), ``position_ids`` counting from 0, ``pixel_values`` of ``config.image_size``,
``input_features`` of ``num_mel_bins`` x ``2 * max_source_positions`` frames.
"""
from __future__ import annotations

import inspect
import itertools
import os

import torch

TEXT_DEFAULTS = ("input_ids", "attention_mask")
IMAGE_DEFAULTS = ("pixel_values",)
SPEECH_DEFAULTS = ("input_features",)
# a tokenizer or processor saved with the model leaves one of these
PROCESSOR_FILES = {"text": ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model"),
                   "image": ("preprocessor_config.json", "processor_config.json"),
                   "speech": ("preprocessor_config.json", "processor_config.json")}
# names build_inputs can make a tensor for (what --inputs may name)
# inputs a tokenizer or processor may leave out (return_token_type_ids=False, return_attention_mask=False)
OMITTABLE = ("token_type_ids", "attention_mask", "position_ids", "pixel_mask", "decoder_attention_mask")
BUILDABLE = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "pixel_values", "pixel_mask",
             "input_features", "decoder_input_ids", "decoder_attention_mask")


# the input a forward takes that tells its modality, first match wins (a forward that takes token ids
# is a text model even where it also takes pixels: a multimodal model is fed as text, as before)
FORWARD_MODALITIES = (("input_ids", "text"), ("pixel_values", "image"), ("input_features", "speech"))


def modality(config, accepted: list[str] | None = None) -> str:
    """``speech`` (mel-bin input features), ``image`` (pixel values) or ``text`` (token ids).

    ``accepted``: the names the model's forward takes (``forward_parameters``), where the model is
    built; they decide over the config's fields (BEiT's config has a ``vocab_size``, for its masked
    image modelling head, beside ``image_size``: its forward takes ``pixel_values``, not token ids).
    A forward that takes none of those names (wav2vec2-style ``input_values``) is refused by name."""
    if accepted is not None:
        for name, kind in FORWARD_MODALITIES:
            if name in accepted:
                return kind
        raise ValueError(f"cannot build example inputs for a {type(config).__name__} model: its forward takes "
                         f"none of {', '.join(n for n, _ in FORWARD_MODALITIES)} (it takes {', '.join(accepted)}); "
                         "trace it in Python with tracejit.trace(model, example_kwarg_inputs=...)")
    if getattr(config, "num_mel_bins", None):
        return "speech"
    if getattr(config, "vocab_size", None) is None and getattr(config, "image_size", None):
        return "image"
    if getattr(config, "vocab_size", None) is None:
        raise ValueError(f"cannot build example inputs for a {type(config).__name__}: it has no vocab_size (text), "
                         "image_size (vision) or num_mel_bins (speech)")
    return "text"


def forward_parameters(model) -> list[str]:
    """The names ``model.forward`` takes by keyword."""
    params = inspect.signature(model.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def tokenizer_input_names(path: str, kind: str) -> list[str] | None:
    """``model_input_names`` of the tokenizer (text) or processor (image, speech) saved in ``path``;
    None where there is none (a directory with weights only)."""
    import transformers   # optional dependency: only tracing a Hugging Face model needs it
    if not os.path.isdir(path) or not any(os.path.exists(os.path.join(path, f)) for f in PROCESSOR_FILES[kind]):
        return None   # transformers 5 would make an empty tokenizer of the config's class
    loaders = {"text": ("AutoTokenizer",), "image": ("AutoImageProcessor",),
               "speech": ("AutoFeatureExtractor",)}[kind]
    for name in loaders:
        try:
            processor = getattr(transformers, name).from_pretrained(path)
        except Exception:   # none saved there (OSError, ValueError, KeyError: transformers raises several)
            continue
        names = list(getattr(processor, "model_input_names", None) or [])
        if names:
            return names
    return None


def input_names(model, config, path: str, names: list[str] | None = None) -> list[str]:
    """The keyword inputs to trace: ``names`` (checked against the forward), else the tokenizer's that
    the forward accepts, else the modality's defaults; ``decoder_input_ids`` added for an encoder-decoder."""
    accepted = forward_parameters(model)
    kind = modality(config, accepted)
    if names:
        for name in names:
            if name not in accepted:
                raise ValueError(f"--inputs {','.join(names)}: {type(model).__name__}.forward takes no {name!r}; "
                                 f"it takes {', '.join(accepted)}")
            if name not in BUILDABLE:
                raise ValueError(f"--inputs {','.join(names)}: cannot build an example {name!r}; "
                                 f"--inputs takes {', '.join(BUILDABLE)}")
        return list(dict.fromkeys(names))
    found = tokenizer_input_names(path, kind)
    defaults = {"text": TEXT_DEFAULTS, "image": IMAGE_DEFAULTS, "speech": SPEECH_DEFAULTS}[kind]
    chosen = [n for n in (found or defaults) if n in accepted and n in BUILDABLE]
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in accepted:
        chosen.append("decoder_input_ids")
    if not chosen:
        raise ValueError(f"{type(model).__name__}.forward takes none of the inputs "
                         f"{', '.join(found or defaults)}; name them with --inputs")
    return list(dict.fromkeys(chosen))


def max_length(config, decoder: bool = False) -> int | None:
    """The longest token sequence the model's position embeddings take (None: unbounded)."""
    names = ("max_target_positions",) if decoder else ()
    names += ("max_position_embeddings", "n_positions", "max_target_positions")
    for name in names:
        n = getattr(config, name, None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def build_inputs(config, batch: int, length: int, seed: int = 0, padded_row: int = -1,
                 names: list[str] | None = None, decoder_length: int | None = None, kind: str | None = None) -> dict:
    """Example inputs for ``config``'s model: name -> tensor, for ``names`` (default: the modality's).
    ``decoder_length``: an encoder-decoder's decoder inputs' (default: ``length - 2``, at least 1).
    ``kind``: the model's modality (``modality(config, forward_parameters(model))``; default: the config's)."""
    if batch < 1 or length < 1:
        raise ValueError(f"batch and length must be at least 1; got batch={batch}, length={length}")
    g = torch.Generator().manual_seed(seed)
    kind = kind or modality(config)
    if names is None:
        names = list({"text": TEXT_DEFAULTS, "image": IMAGE_DEFAULTS, "speech": SPEECH_DEFAULTS}[kind])
        if getattr(config, "is_encoder_decoder", False):
            names.append("decoder_input_ids")
    n = _cap(length, max_length(config))
    dec = decoder_length or (length if kind != "text" else max(1, length - 2))
    dec = _cap(dec, max_length(config, decoder=True))
    made = {}
    for name in names:
        made[name] = _build_one(name, config, g, batch, n, dec, padded_row)
    return made


def _build_one(name: str, config, g, batch: int, n: int, dec: int, padded_row: int) -> torch.Tensor:
    if name == "input_ids":
        return _token_ids(config, g, batch, n)
    if name in ("attention_mask", "decoder_attention_mask"):
        size = n if name == "attention_mask" else dec
        mask = torch.ones(batch, size, dtype=torch.long)
        if size > 1:   # pad the end of one row: a trace that baked "no padding" in fails the check
            mask[padded_row, size - min(3, size - 1):] = 0
        return mask
    if name == "token_type_ids":
        return torch.randint(0, max(1, int(getattr(config, "type_vocab_size", 1) or 1)), (batch, n), generator=g)
    if name == "position_ids":
        return torch.arange(n).expand(batch, n).contiguous()
    if name == "pixel_values":
        size = config.image_size
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        return torch.randn(batch, getattr(config, "num_channels", 3), h, w, generator=g)
    if name == "pixel_mask":
        size = config.image_size
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        return torch.ones(batch, h, w, dtype=torch.long)
    if name == "input_features":
        frames = 2 * config.max_source_positions   # the encoder's convs: stride 1, then stride 2
        return torch.randn(batch, config.num_mel_bins, frames, generator=g)
    if name == "decoder_input_ids":
        return _token_ids(config, g, batch, dec)
    raise ValueError(f"cannot build an example {name!r}; expected one of {', '.join(BUILDABLE)}")


def _token_ids(config, g, batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, config.vocab_size, (batch, length), generator=g)


def _cap(n: int, limit: int | None) -> int:
    return n if limit is None else min(n, limit)


def serving_shapes(config, batch: int, length: int, kind: str | None = None) -> list[tuple]:
    """(batch, length) pairs a server meets besides the example's: batch 1 and many, length 1 and
    many (text; an image's size is the model's, so only the batch changes). Padded where length > 1.
    A text encoder-decoder also gets (batch, length, decoder length) triples that cross encoder and
    decoder lengths 1 and many (a generation step: one decoder token beside a long text; a long
    target beside a one-word text): the attention code of each side tests its own length."""
    many = max(batch, 3)
    if (kind or modality(config)) != "text":
        return [(1, length), (many, length)]
    longest = _cap(max(length, 13), max_length(config))
    pairs = [(1, 1), (1, longest), (many, 1), (many, longest), (1, 2), (many, 2)]
    if getattr(config, "is_encoder_decoder", False):
        dec_longest = _cap(max(length, 13), max_length(config, decoder=True))
        pairs += [(b, n, d) for b in (1, many) for n, d in ((1, dec_longest), (longest, 1))]
    return [p for p in dict.fromkeys(pairs) if p != (batch, length)]


def omittable_subsets(model, names: list[str]) -> list[tuple[str, ...]]:
    """The sets of traced inputs a caller may leave out: every non-empty combination of ``names`` in
    ``OMITTABLE`` that ``model.forward`` has a default for (BERT traced with ``input_ids,
    token_type_ids, attention_mask``: without ``token_type_ids``, without ``attention_mask``, without
    both). The single omissions come first."""
    params = inspect.signature(model.forward).parameters
    optional = [n for n in names if n in OMITTABLE and n in params and params[n].default is not inspect.Parameter.empty]
    return [c for k in range(1, len(optional) + 1) for c in itertools.combinations(optional, k)]
