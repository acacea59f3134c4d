"""The torch.jit-compatible methods of the objects users hold that need the upper layers: ``.save``
(serialize/) and ``.to_html`` (viewer/). The runtime defines TracedFunction and TracedModule without
them, so it imports neither; importing tracejit installs them (``install``). The viewer is imported by
``to_html`` when it is called: a server that loads and calls programs never needs it."""
from __future__ import annotations

from .lazy_module import LazyModule
from .porting import save as _save
from .runtime.traced import TracedFunction, TracedModule

_viewer = LazyModule(".viewer", __package__)   # a server that loads and calls programs never imports it (issue #22)


def save(self, f, _extra_files=None, **options) -> None:
    """Save to ``f`` (a path or a binary file object), as ``tracejit.save(self, f, ...)``."""
    _save(self, f, _extra_files, **options)


def to_html(self, path) -> str:
    """Write an interactive, self-contained HTML view of the graphs (tracejit/viewer)."""
    return _viewer.view(self, path)


def install() -> None:
    """Give TracedFunction and TracedModule (and their subclasses) ``save`` and ``to_html``."""
    for cls in (TracedFunction, TracedModule):
        cls.save = save
        cls.to_html = to_html


install()
