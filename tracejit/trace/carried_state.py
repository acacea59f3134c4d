"""Is a module attribute that forward set a value carried from one call to the next? (hunt25)

python_state.py does not refuse two kinds of attribute writes in forward: an attribute that was None and is
set (a lazy set-up on the first call: torchvision's ``MultiScaleRoIAlign.scales``), and a plain tensor
attribute (a parent handing a tensor to a submodule: ``self.inner.ctx = x.mean()``). Both rest on one claim:
the value the next call reads is not the trace's business (set up once, or set before it is read in the same
call). The claim is false when forward reads the attribute BEFORE setting it, other than to ask whether it
is None (``out = x * 2 if self.last == n else x; self.last = n``: eager's next call reads this call's value,
the program keeps the trace's branch), or sets it more than once (``if self.h is None: self.h = zeros``
then ``self.h = 0.5 * self.h + x``: a recurrent state).

outer_state.py asks the same of a global or a closure cell (``nonlocal last``) that was None or held a tensor.

``carried(name, codes)`` answers from the bytecode of the user's code objects that ran in the trace and
store the attribute: a load of it that comes before the first store and is not an ``is None`` /
``is not None`` test, or two stores of it, count as carried (refused, as a changed attribute is). Code that
loads the name without storing it (a submodule reading what its parent set) is not looked at.
"""
from __future__ import annotations

import dis
from functools import lru_cache

_OPS = {   # kind -> (loads, store): a module attribute, a closure cell (nonlocal), a global
    "attr": (("LOAD_ATTR", "LOAD_METHOD"), "STORE_ATTR"),
    "cell": (("LOAD_DEREF", "LOAD_CLASSDEREF"), "STORE_DEREF"),
    "global": (("LOAD_GLOBAL", "LOAD_NAME"), "STORE_GLOBAL"),
}
_NONE_JUMPS = ("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NONE",
               "POP_JUMP_BACKWARD_IF_NOT_NONE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")


@lru_cache(maxsize=4096)
def _accesses(code, what: str = "attr") -> dict:
    """``{name: [(kind, none_test), ...]}`` in instruction order: kind "load" or "store" of ``name`` (``what``: an
    attribute, a closure cell or a global); ``none_test``: the load is only compared with None (``x is None``)."""
    loads, store = _OPS[what]
    ins = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG", "NOP")]
    out: dict = {}
    for k, i in enumerate(ins):
        if not isinstance(i.argval, str):
            continue
        if i.opname == store:
            out.setdefault(i.argval, []).append(("store", False))
        elif i.opname in loads:
            nxt = ins[k + 1] if k + 1 < len(ins) else None
            after = ins[k + 2] if k + 2 < len(ins) else None
            none_test = nxt is not None and (nxt.opname in _NONE_JUMPS or (
                nxt.opname == "LOAD_CONST" and nxt.argval is None and after is not None and after.opname == "IS_OP"))
            out.setdefault(i.argval, []).append(("load", none_test))
    return out


def carried(name: str, codes, what: str = "attr") -> bool:
    """Does some code object of ``codes`` that stores ``name`` (``what``: "attr", "cell" or "global") read it
    before its first store (other than an ``is None`` test), or store it twice? (The module docstring.)"""
    for code in codes:
        seq = _accesses(code, what).get(name)
        if not seq or not any(kind == "store" for kind, _ in seq):
            continue
        if sum(kind == "store" for kind, _ in seq) > 1:
            return True
        for kind, none_test in seq:
            if kind == "store":
                break
            if not none_test:
                return True
    return False
