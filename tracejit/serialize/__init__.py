"""tracejit's file: ``save`` (archive.py, imported on first use: a server that only loads does not import the
writer) and ``load`` (loader.py). docs/FORMAT.md."""
from ..lazy_module import LazyModule
from .file_format import SCHEMA_VERSION
from .loader import load, read_program

_archive = LazyModule(".archive", __package__)   # the writer: a server that only loads never imports it (issue #22)

__all__ = ["load", "read_program", "save", "SCHEMA_VERSION"]


def save(obj, f, *, extra_files=None, durable: bool = True) -> None:
    """Save a TracedFunction or TracedModule to ``f``: ``tracejit.serialize.archive.save``."""
    _archive.save(obj, f, extra_files=extra_files, durable=durable)
