"""torch.jit's spellings of save and load: ``_extra_files`` as the third argument.

``tracejit.save(m, f, _extra_files={...})`` and ``tracejit.load(f, map_location, _extra_files)``
take the arguments in the order torch.jit's functions do, so ported code keeps working; the
keyword spellings of ``tracejit.serialize`` (``extra_files=``, ``durable=``, ``check_integrity=``)
are accepted too.
"""
from __future__ import annotations

import os

from . import serialize
from .errors import ProgramNotFoundError
from .gc_pause import collector_paused


def save(m, f, _extra_files=None, *, extra_files=None, **options) -> None:
    """Save a TracedFunction or TracedModule to ``f`` (a path or a binary file object).

    ``_extra_files`` (torch.jit's spelling) or ``extra_files``: name -> str or bytes, stored beside
    the program. Other options are those of ``tracejit.serialize.save`` (``durable``).

    >>> import io, torch, tracejit
    >>> t = tracejit.trace(lambda x: x * 2, torch.ones(2))
    >>> buf = io.BytesIO(); tracejit.save(t, buf, _extra_files={"note.txt": "hi"}); _ = buf.seek(0)
    >>> files = {"note.txt": ""}
    >>> tracejit.load(buf, _extra_files=files)(torch.ones(3)), files
    (tensor([2., 2., 2.]), {'note.txt': b'hi'})
    """
    serialize.save(m, f, extra_files=_pick(_extra_files, extra_files), **options)


def load(f, map_location=None, _extra_files=None, *, extra_files=None, **options):
    """Load a program saved by ``tracejit.save``; returns a TracedFunction or TracedModule.

    ``_extra_files`` (torch.jit's spelling) or ``extra_files``: a dict whose keys name the extra files
    to read back; their contents are filled in as bytes. Other options are those of
    ``tracejit.serialize.load`` (``check_integrity``). A damaged or foreign file raises
    ``tracejit.LoadError`` (a RuntimeError, as torch.jit's load raises); a path that does not exist
    raises ``tracejit.ProgramNotFoundError`` (a LoadError and a ValueError, as torch.jit's load raises).
    """
    if isinstance(f, (str, os.PathLike)) and not os.path.exists(f):
        raise ProgramNotFoundError(f"The provided filename {os.fspath(f)} does not exist (no such file)")
    with collector_paused():   # the loader's allocations would run the collection `import torch` left due
        return serialize.load(f, map_location, extra_files=_pick(_extra_files, extra_files), **options)


def _pick(torch_spelling, tracejit_spelling):
    if torch_spelling is not None and tracejit_spelling is not None:
        raise TypeError("pass the extra files once: either _extra_files (torch.jit's spelling) or extra_files")
    return torch_spelling if torch_spelling is not None else tracejit_spelling
