"""The plain torch program as a backend: the traced program itself, every op as recorded, no passes.

The reference the other backends are compared with; it follows autocast, keeps NaN and reads captured
tensors as they are now, so the fallback policy has nothing to add.
"""
from __future__ import annotations

NAME = "program"


class PlainProgram:
    """Calls the traced program; the traced object itself is not changed."""

    backend = NAME

    def __init__(self, traced):
        self.traced = traced

    def __call__(self, *args, **kwargs):
        return self.traced(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<PlainProgram {self.traced!r}>"


def build(traced, **options) -> PlainProgram:
    if options:
        raise TypeError(f"the {NAME!r} backend takes no options; got {sorted(options)}")
    return PlainProgram(traced)
