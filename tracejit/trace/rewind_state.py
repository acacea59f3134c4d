"""The Python state of a traced hierarchy, taken before a second recording run and put back when the trace fails.

trace/attempts.py records forward a second time after a first run that only set the module up or whose tensor
escaped a submodule's call. Where that second run is refused (it changed a counter, appended to a list, ...), the
TraceError used to leave the second run's changes on the user's model (hunt28: a counter read one call more than
eager's). *Decision (hunt30):* a refused trace leaves the model as after ONE eager call, the first run's: the state
the user would see had they called the model once, which is also what torch.jit's tracer (one run) leaves.

Taken and put back, shallowly, for each module of the hierarchy and each object it holds (python_state.snapshot's
objects with an instance ``__dict__``): every attribute (rebound, added or removed), and the items of each ``list``
/ ``dict`` / ``set`` / ``deque`` attribute (nn.Module's own ``_parameters`` / ``_buffers`` / ``_modules`` / hook
dicts among them: a hook the second run registered is removed). Not put back: tensors' data (a second run is only
made where the first wrote none in place: attempts.Attempt.changed), attributes of objects deeper than that, classes'
attributes, globals and closures (outer_state.py refuses a change to those, naming it).
"""
from __future__ import annotations

import collections

from . import python_state

_CONTAINERS = (list, dict, set, collections.deque)
_MISSING = object()


def _copy_items(c):
    if isinstance(c, dict):
        return dict(c)
    return list(c)


def _put_items(c, items) -> None:
    if isinstance(c, dict):
        if dict(c) != items or list(c) != list(items):
            c.clear()
            c.update(items)
    elif isinstance(c, (list, collections.deque)):
        if list(c) != items:
            c.clear()
            c.extend(items)
    elif set(c) != set(items):
        c.clear()
        c.update(items)


class HierarchyState:
    """The attributes (and their containers' items) of every object of a module hierarchy, at one moment."""

    def __init__(self, module):
        self.kept = []
        seen: set[int] = set()
        for obj, _ in python_state.snapshot(module).values():
            attrs = getattr(obj, "__dict__", None)
            if isinstance(obj, type) or not isinstance(attrs, dict) or id(obj) in seen:
                continue
            seen.add(id(obj))
            items = {k: _copy_items(v) for k, v in attrs.items() if type(v) in _CONTAINERS or
                     isinstance(v, _CONTAINERS)}
            self.kept.append((obj, dict(attrs), items))

    def restore(self) -> None:
        """Put every attribute and container item back as it was when this was taken."""
        for obj, attrs, items in self.kept:
            now = obj.__dict__
            for key in [k for k in now if k not in attrs]:
                del now[key]
            for key, value in attrs.items():
                if now.get(key, _MISSING) is not value:
                    now[key] = value
            for key, saved in items.items():
                try:
                    _put_items(attrs[key], saved)
                except Exception:  # noqa: BLE001  (a container subclass that refuses: leave it)
                    pass
