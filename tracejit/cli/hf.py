"""``tracejit trace --hf PATH_OR_ID [--task TASK] -o FILE``: trace a transformers model (the
library part is tracejit/hf.py), save it and print what was done.

The long steps (load, trace, check, save) show a progress bar (tqdm, imported only then; a plain
line per step without it) when stdout is a terminal; otherwise only the summary is printed."""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from .. import hf
from ..errors import TraceError
from ..hf import ALIASES, TASKS, describe_inputs
from .common import CLIError, human, ledger_source, plural, save_program


def add_arguments(parser) -> None:
    """The ``--hf`` options of ``tracejit trace``."""
    g = parser.add_argument_group("Hugging Face models (--hf)")
    g.add_argument("--hf", metavar="PATH_OR_ID",
                   help="trace a transformers model: a directory saved with save_pretrained, or a hub id (needs the "
                        "network unless cached); example inputs are built from its config")
    g.add_argument("--task", metavar="TASK",
                   help=f"with --hf: one of {', '.join(TASKS)} (also {', '.join(ALIASES)}); default: from the "
                        "config's architectures")
    g.add_argument("--batch", type=_positive, help="with --hf: the example batch size (default 2)")
    g.add_argument("--length", type=_positive,
                   help="with --hf: the example sequence length (default 8; capped by the model's positions)")
    g.add_argument("--use-cache", action="store_true",
                   help="with --hf: trace with the decoder's cache (transformers' DynamicCache is not "
                        "pytree-registered, so today this fails with that message)")
    g.add_argument("--inputs", dest="hf_inputs", metavar="NAME,NAME", type=_names,
                   help="with --hf: the keyword inputs to trace (default: what the tokenizer or processor saved "
                        "with the model returns that its forward accepts, e.g. input_ids,token_type_ids,"
                        "attention_mask)")
    g.add_argument("--no-check", dest="check", action="store_false",
                   help="with --hf: skip the comparison with eager transformers on other sizes (and on the "
                        "shapes a server meets: batch 1 and many, length 1 and many, padded)")


HF_ONLY = ("task", "batch", "length", "hf_inputs")


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(n.isidentifier() for n in names):
        raise argparse.ArgumentTypeError(f"expected input names separated by commas (input_ids,attention_mask); "
                                         f"got {text!r}")
    return names


def check_hf_only(args) -> None:
    """The --hf options without --hf: a usage error (they would be ignored)."""
    given = [f"--{name.replace('hf_', '')}" for name in HF_ONLY if getattr(args, name) is not None]
    given += ["--use-cache"] if args.use_cache else []
    given += ["--no-check"] if not args.check else []
    if given:
        raise CLIError(f"{', '.join(given)} only go with --hf PATH_OR_ID", 2)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {n}")
    return n


class Progress:
    """The steps on stderr, only when stdout is a terminal: one tqdm bar, or a plain line per step
    where tqdm is not installed (it is optional: imported only here)."""

    STEPS = ("load", "trace", "check", "save")

    def __init__(self, enabled: bool):
        self.bar = None
        self.lines = False
        if not enabled:
            return
        try:
            from tqdm import tqdm   # optional dependency (transformers installs it): progress bars only
        except ImportError:
            self.lines = True
            return
        size = shutil.get_terminal_size((80, 24))   # 80 x 24 where the terminal says 0 x 0 (tqdm: no bar)
        self.bar = tqdm(total=len(self.STEPS), desc="load", unit="step", leave=False, ncols=min(80, size.columns),
                        nrows=size.lines, bar_format="{desc:<6} {bar} {n_fmt}/{total_fmt} [{elapsed}]")

    def __call__(self, step: str) -> None:
        if self.lines:
            sys.stderr.write(f"{step} ...\n")
            sys.stderr.flush()
        if self.bar is None:
            return
        self.bar.update(self.STEPS.index(step) - self.bar.n)
        self.bar.set_description_str(step)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.update(len(self.STEPS) - self.bar.n)
            self.bar.close()


def check_model_path(path: str) -> None:
    """One clear line for a --hf path that is not a saved model: a file (any kind), a directory without
    config.json, a missing local path (a name without a leading ./, / or ~ may be a hub id)."""
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise CLIError(f"--hf {path}: no config.json in this directory: not a model saved with save_pretrained")
        return
    if os.path.exists(path):
        raise CLIError(f"--hf {path}: is a file, not a directory saved with save_pretrained (or a hub id)")
    local = path.startswith((".", "/", "~")) or path.endswith(("/", os.sep)) or path.count("/") > 1 \
        or (os.sep != "/" and os.sep in path)
    if local:
        raise CLIError(f"--hf {path}: no such directory")


def cmd_trace_hf(args) -> int:
    check_model_path(args.hf)
    progress = Progress(sys.stdout.isatty())
    try:
        try:
            result = hf.trace_pretrained(args.hf, args.task, batch=args.batch or 2, length=args.length or 8,
                                         use_cache=args.use_cache, check=args.check, seed=args.seed,
                                         progress=progress, inputs=args.hf_inputs)
        except (ValueError, OSError) as e:   # a bad task or model; a missing directory or hub id
            raise CLIError(f"--hf {args.hf}: {_first_line(e)}") from None
        except hf.PretrainedCheckError as e:
            raise CLIError(f"--hf {args.hf}: the traced program differs from eager transformers: {e}") from None
        except TraceError as e:
            raise CLIError(f"--hf {args.hf}: tracing failed: {_first_line(e)}") from None
        except Exception as e:
            raise CLIError(f"--hf {args.hf}: {type(e).__name__}: {_first_line(e)}") from None
        progress("save")
        save_program(result.traced, args.output)
    finally:
        progress.close()
    _summary(args, result)
    return 0


def _shape(inputs: dict) -> str:
    """``[batch, length]`` of a served input set; ``[batch, length -> decoder length]`` for an encoder-decoder."""
    dims = [str(s) for s in next(iter(inputs.values())).shape[:2]]
    dec = inputs.get("decoder_input_ids")
    return f"[{', '.join(dims)}{f' -> {dec.shape[1]}' if dec is not None else ''}]"


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _summary(args, result) -> None:
    traced = result.traced
    size = os.path.getsize(args.output)
    numel = sum(t.numel() for t in {id(t): t for t in traced.parameters()}.values())
    ledger = traced.ledger
    print(f"traced {args.hf} ({result.model_class}, task {result.task}) in eval mode, return_dict=True, "
          f"use_cache={args.use_cache}, strict=False")
    print(f"  example:    {describe_inputs(result.example)}")
    if result.checked:
        print(f"  checked:    equals eager transformers on {describe_inputs(result.checked)} "
              f"(max abs diff {result.max_abs_diff:.2g}; outputs {', '.join(result.outputs)})")
        if result.check_note:
            print(f"              ({result.check_note})")
        if result.served:
            shapes = ", ".join(_shape(x) for x in result.served)
            print(f"  served:     equals eager on the shapes a server meets too: {shapes}")
        if result.omitted:
            print(f"  omitted:    equals eager without {'; without '.join(', '.join(s) for s in result.omitted)} too "
                  "(the forward's defaults)")
    else:
        print("  checked:    no (--no-check)")
    print(f"  file:       {args.output} ({size} bytes, {human(size)})")
    print(f"  parameters: {numel}")
    print(f"  ledger:     {plural(len(ledger), 'entry', 'entries')}")
    for e in ledger:
        print(f"    {e.kind:<12} {ledger_source(e)}  {' '.join(str(e.message).split())}")
    print(f"  call it as: tracejit.load({args.output!r})({', '.join(f'{k}=...' for k in result.example)})")
