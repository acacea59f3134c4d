"""The scalar configuration of torch's and installed libraries' modules, checked in memory (hunt26).

``nn.Dropout(p)``, ``nn.LayerNorm(eps=...)``, ``nn.LeakyReLU(negative_slope)``, timm's ``DropPath(drop_prob)``: their
forward (torch's or the library's code) reads plain attributes of the module, and the trace freezes what it read (a
dropout probability, an epsilon). Changing one after the trace (``model.drop.p = 0.2``, ``model.norm.eps = 1e-6``):
eager reads the new value, the program kept the old one, silently (torch.jit.trace too). The user's own module
classes have their read attributes guarded in the graph (global_reads.py); these are not the user's code, so every
public attribute holding a bool, int, float, str, None or a small tuple of those (``kernel_size``, ``stride``) is
held with its value in the graph's ``memory_checks`` (those its class's forward reads, where its source tells:
forward_reads.py) (support/global_guards.IdentityChecks: one C-level tuple
compare per call, outside the graph: a file keeps no check of Python state). A live or optimized program traces
again when one changed; one whose original was dropped raises GuardError naming the attribute.
A private attribute counts where the class's source shows forward reading it, and so does a small dict or list of
such values (hunt29: torchvision's ``model.rpn._post_nms_top_n = dict(training=.., testing=..)`` set after the trace
was ignored, silently; the check holds a copy, so an update in place is seen too). Other mutable containers (a
library's warn-once dict of objects) are left out; ``allow_frozen_python_state=True`` skips the checks.
"""
from __future__ import annotations

import copy

from torch import nn

from ..ir import GUARD, Node
from ..support.global_guards import IdentityChecks, guardable
from .forward_reads import attributes_read
from .global_reads import KIND, _user_class_anywhere

_SCALARS = (bool, int, float, str, type(None))


def _scalar_config(value) -> bool:
    if type(value) in _SCALARS:
        return True
    return type(value) is tuple and len(value) <= 8 and all(type(v) in _SCALARS for v in value)


def _config_value(value):
    """What the check compares ``value`` with: itself (a scalar or a tuple of them), a copy of a small dict or list
    of scalars (so a write into it is seen), or None where it is not a setting."""
    if _scalar_config(value):
        return value
    if type(value) in (dict, list) and len(value) <= 8 and all(
            _scalar_config(v) for v in (value.values() if isinstance(value, dict) else value)):
        return copy.copy(value)
    return None


def add_checks(graph, module, allowed: bool) -> None:
    """Add to ``graph.memory_checks`` the scalar attributes of the hierarchy's torch / library modules."""
    if allowed or module is None:
        return
    values = []
    for path, m in module.named_modules(remove_duplicate=True):
        if _user_class_anywhere(type(m)) or type(m).__module__.startswith("tracejit."):
            continue   # the user's own classes: guarded in the graph where their code reads them
        space = vars(m)
        read = None if "forward" in space else attributes_read(type(m))   # None: every attribute counts
        for attr, value in list(space.items()):
            if attr.startswith("__") or attr == "training" or guardable(value) is None:
                continue
            if (read is not None and attr not in read) or (attr.startswith("_") and read is None):
                continue   # its forward never reads it (forward_reads.py: Linear's in_features), or bookkeeping
            value = _config_value(value)
            if value is None:
                continue
            where = f"`{path}.{attr}`" if path else f"`{attr}`"
            node = Node(GUARD, "", (), attrs={
                "kind": KIND, "test": KIND, "expected": value, "seen": value, "name": attr, "line": "",
                "what": f"{where} (an attribute of {type(m).__name__}, read by its forward) was {value!r} when traced"},
                source=None, effectful=True)
            values.append((space, attr, value, node))
    if values:
        graph.memory_checks = (graph.memory_checks or IdentityChecks(())).joined(values=values)


def remember_settings(traced, module) -> None:
    """Give each traced module of ``traced`` the public scalar attributes of its original in ``module`` (in memory):
    reading one gives the value the trace saw, setting one is refused (runtime/traced.TracedModule.__setattr__:
    the program holds the traced value, so ``traced.drop.p = 0.2`` would change nothing, silently)."""
    for path, original in module.named_modules(remove_duplicate=False):
        try:
            copy = traced.get_submodule(path) if path else traced
        except AttributeError:
            continue
        settings = {attr: value for attr, value in vars(original).items()
                    if not attr.startswith("_") and attr != "training" and _scalar_config(value)}
        if settings and "original_name" in vars(copy):   # a traced module (not a module of the user's)
            copy.__dict__["_original_settings"] = settings
