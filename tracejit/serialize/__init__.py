"""tracejit's file: ``save`` (archive.py, imported on first use: a server that only loads does not import the
writer) and ``load`` (loader.py). docs/FORMAT.md."""
from .file_format import SCHEMA_VERSION
from .loader import load, read_program

__all__ = ["load", "read_program", "save", "SCHEMA_VERSION"]


def save(obj, f, *, extra_files=None, durable: bool = True) -> None:
    """Save a TracedFunction or TracedModule to ``f``: ``tracejit.serialize.archive.save``."""
    from .archive import save as write   # the writer: a server that only loads never imports it (issue #22)
    write(obj, f, extra_files=extra_files, durable=durable)
