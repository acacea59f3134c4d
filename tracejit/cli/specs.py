"""Parsing the command line's arguments: input specs (``float32[1,3,224,224]``), factory references
(``models:resnet18``), positive counts, and the one-line usage errors of the parser."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import textwrap

import torch

from .common import fail

# dtype names accepted in an input spec
DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")
_SPEC_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\[([^\]]*)\]\s*$")

INPUT_HELP = ("an input tensor as DTYPE[D0,D1,...], e.g. 'float32[1,3,224,224]'; repeat for each positional "
              f"argument, in order. DTYPE is one of {', '.join(DTYPE_NAMES)}. Float inputs are drawn with "
              "torch.randn, integer inputs with torch.randint(0, 10), bool inputs at random. Quote it in the "
              "shell.")
DEBUG_HELP = "on an error, show the full Python traceback instead of one line"
FORMATTER = argparse.RawDescriptionHelpFormatter


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one line: ``tracejit: error: ...`` and exit status 2."""

    def error(self, message):  # noqa: D401 - argparse's hook
        hint = f"; see '{self.prog} --help'"
        fail(f"{message}{hint}", 2)


class InputSpec:
    """``float32[1,3,224,224]``: a dtype and a shape."""

    def __init__(self, text: str, dtype_name: str, shape: tuple):
        self.text, self.dtype_name, self.shape = text, dtype_name, shape

    @property
    def dtype(self):
        return getattr(torch, self.dtype_name)

    def make(self, generator=None, int_high: int = 10):
        """A random tensor of this dtype and shape: randn, or randint(0, int_high), or random bools.
        The one place the CLI makes input tensors (--input and the traced types' defaults)."""
        d = self.dtype
        if d.is_floating_point:
            return torch.randn(self.shape, dtype=d, generator=generator)
        if d == torch.bool:
            return torch.randint(0, 2, self.shape, generator=generator).bool()
        return torch.randint(0, int_high, self.shape, dtype=d, generator=generator)

    def __repr__(self):
        return f"{self.dtype_name}[{', '.join(map(str, self.shape))}]"


def parse_input_spec(text: str) -> InputSpec:
    """argparse type for --input: ``DTYPE[D0,D1,...]`` (``float32[]`` is a 0-d tensor)."""
    m = _SPEC_RE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"bad input spec {text!r}: expected DTYPE[D0,D1,...], e.g. 'float32[1,3,224,224]'")
    name, dims = m.group(1), m.group(2).strip()
    if name not in DTYPE_NAMES:
        raise argparse.ArgumentTypeError(
            f"bad input spec {text!r}: unknown dtype {name!r} (one of {', '.join(DTYPE_NAMES)})")
    shape = []
    if dims:
        for d in dims.split(","):
            d = d.strip()
            if not d.isdigit():
                raise argparse.ArgumentTypeError(
                    f"bad input spec {text!r}: dimension {d!r} is not a non-negative integer")
            shape.append(int(d))
    return InputSpec(text, name, tuple(shape))


def factory_ref(text: str) -> str:
    """argparse type for ``MODULE:CALLABLE``."""
    module, sep, attr = text.partition(":")
    if module.endswith(".py"):
        raise argparse.ArgumentTypeError(f"bad factory {text!r}: name the module, not its file "
                                         f"(e.g. '{module[:-3].replace(os.sep, '.')}:{attr or 'CALLABLE'}')")
    ok = sep and all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in attr.split("."))
    if not ok:
        raise argparse.ArgumentTypeError(f"bad factory {text!r}: expected MODULE:CALLABLE, e.g. 'models:resnet18' "
                                         "(MODULE is imported from the current directory)")
    return text


def positive(text: str) -> int:
    """argparse type for a count of at least 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def wrap(text: str) -> str:
    """A help paragraph filled to the terminal's width (at most 100 columns)."""
    return textwrap.fill(" ".join(text.split()), width=min(100, shutil.get_terminal_size().columns - 2))
