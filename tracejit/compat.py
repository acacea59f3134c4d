"""What differs between the torch releases tracejit supports (2.11 to 2.15), in one place.

Each shim says which releases need it and why. Code elsewhere in tracejit imports these names
instead of reaching into torch for them, so a new torch release is handled here.

``redispatch_function`` (torch >= 2.13 has it as ``torch.overrides.redispatch_function``)
    The recorder is a TorchFunctionMode that traces *through* torch's Python helpers
    (``F.interpolate``, ``Tensor.__rsub__``): it re-enters itself (``with self:``) and calls the
    helper with one hop of ``__torch_function__`` dispatch skipped, so the helper's body runs
    while the C++ ops it calls reach the mode. torch 2.13 added a C entry point for that skip.
    On 2.11 / 2.12 the same effect is built here: the helper is called as a copy of itself (same
    code, defaults, closure) whose globals answer False to its own ``has_torch_function*`` checks,
    the one hop (named directly, or reached through ``torch`` / ``torch.overrides``). Nothing process-wide is patched, so other threads (and helpers the body calls,
    which have their own globals) dispatch as usual; the copy runs the same code object, so
    source locations (``trace.source.user_location``) and tracebacks are those of the helper.
    A ``torch.ops`` operator handle (``torch.ops.torchvision.nms``) is a C++ operator: its one hop is the
    whole call, which runs with ``__torch_function__`` off. Any other callable that is not a Python function
    (nothing to copy) gets a TypeError that says so.

``call_classmethod``
    ``torch.autograd.Function.apply`` is a Python ``classmethod`` up to torch 2.13 and a C
    classmethod descriptor (``_C._FunctionBase.__dict__["apply"]``) from 2.14 on, which has no
    ``__func__``. Binding through the descriptor protocol (``__get__(None, cls)``) works for both.
"""
from __future__ import annotations

import types

import torch
import torch.overrides

# The names under which torch's Python helpers check for __torch_function__ overrides: the C
# functions torch.overrides re-exports (helpers import them into their module's globals).
_CHECKS = tuple(getattr(torch._C, name) for name in (
    "_has_torch_function", "_has_torch_function_unary", "_has_torch_function_variadic"))


_CHECK_NAMES = frozenset(("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic",
                          "_has_torch_function", "_has_torch_function_unary", "_has_torch_function_variadic"))


def _no_override(*args, **kwargs) -> bool:
    """Stands for ``has_torch_function*`` in the one helper call whose hop is skipped."""
    return False


class _ChecksAnswerFalse:
    """Stands for ``torch``, ``torch.overrides`` or ``torch._C`` in a copied helper's globals when the
    helper reaches its check through the module (``overrides.has_torch_function_unary(a)``, as
    ``torch.sym_float`` does): the checks answer False, every other attribute is the module's."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        if name in _CHECK_NAMES:
            return _no_override
        value = getattr(self._module, name)
        return _ChecksAnswerFalse(value) if any(value is m for m in _CHECK_MODULES) else value


_CHECK_MODULES = (torch, torch.overrides, torch._C)


# torch.ops.<ns>.<op> and its overloads: handles of C++ operators (torchvision's nms reaches a mode as one)
_TORCH_OPS = (torch._ops.OpOverloadPacket, torch._ops.OpOverload)

_check_names: dict[int, list[str]] = {}   # id(module globals) -> the names its checks go by


def _redispatch_by_copy(func, types_, args, kwargs):
    """torch < 2.13: call ``func`` with its own ``__torch_function__`` checks answered False (see the
    module docstring); ``types_`` is unused, as it is by torch's own implementation."""
    kwargs = kwargs or {}
    target = func
    bound_to = None
    if isinstance(func, types.MethodType):   # a bound method: copy its function, keep what it is bound to
        target, bound_to = func.__func__, func.__self__
    if isinstance(target, _TORCH_OPS):   # a C++ op behind a Python handle: its one hop is the whole call
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)
    if not isinstance(target, types.FunctionType):
        raise TypeError(
            f"tracejit cannot trace through {func!r} ({type(func).__name__}) on torch "
            f"{torch.__version__}: it needs torch.overrides.redispatch_function (torch >= 2.13) for a "
            "callable that is not a Python function")
    module_globals = target.__globals__
    names = _check_names.get(id(module_globals))
    if names is None or any(module_globals.get(name) not in _CHECKS for name in names):
        names = [k for k, v in module_globals.items() if any(v is check for check in _CHECKS)]
        _check_names[id(module_globals)] = names
    through = [k for k, v in module_globals.items() if any(v is m for m in _CHECK_MODULES)] \
        if _CHECK_NAMES.intersection(target.__code__.co_names) else []
    closure = target.__closure__
    if not names and not through:
        # no check of its own: a dispatcher (``boolean_dispatch``'s ``fn`` behind F.max_pool2d) whose check is
        # in the functions it holds in its closure; torch's skip goes to the next check, so copy those
        closure = _closure_with_copies(closure)
        if closure is target.__closure__:
            return func(*args, **kwargs)   # nothing checks: nothing to skip
    copied_globals = dict(module_globals)
    for name in names:
        copied_globals[name] = _no_override
    for name in through:
        copied_globals[name] = _ChecksAnswerFalse(module_globals[name])
    if not _CHECK_NAMES.intersection(target.__code__.co_names):
        # no check in its own body: the check is in a helper of its module it calls (``meshgrid`` ->
        # ``_meshgrid``, whose handle_torch_function names the public ``meshgrid``); copy those helpers too
        for name in target.__code__.co_names:
            helper = module_globals.get(name)
            if isinstance(helper, types.FunctionType) and helper.__globals__ is module_globals \
                    and _CHECK_NAMES.intersection(helper.__code__.co_names):
                twin = types.FunctionType(helper.__code__, copied_globals, helper.__name__, helper.__defaults__,
                                          helper.__closure__)
                twin.__kwdefaults__, twin.__qualname__ = helper.__kwdefaults__, helper.__qualname__
                copied_globals[name] = twin
    copy = types.FunctionType(target.__code__, copied_globals, target.__name__, target.__defaults__, closure)
    copy.__kwdefaults__ = target.__kwdefaults__
    copy.__qualname__ = target.__qualname__
    if bound_to is not None:
        return copy(bound_to, *args, **kwargs)
    return copy(*args, **kwargs)


def _closure_with_copies(closure):
    """``closure`` with each Python function in it replaced by a copy whose own checks answer False
    (the same closure when no function in it checks anything)."""
    if not closure:
        return closure
    cells, changed = [], False
    for cell in closure:
        value = cell.cell_contents if cell.cell_contents is not None else None
        if isinstance(value, types.FunctionType) and _CHECK_NAMES.intersection(value.__code__.co_names):
            copied = dict(value.__globals__)
            for k, v in value.__globals__.items():
                if any(v is check for check in _CHECKS):
                    copied[k] = _no_override
                elif any(v is m for m in _CHECK_MODULES):
                    copied[k] = _ChecksAnswerFalse(v)
            twin = types.FunctionType(value.__code__, copied, value.__name__, value.__defaults__, value.__closure__)
            twin.__kwdefaults__ = value.__kwdefaults__
            cells.append(types.CellType(twin))
            changed = True
        else:
            cells.append(cell)
    return tuple(cells) if changed else closure


redispatch_function = getattr(torch.overrides, "redispatch_function", None) or _redispatch_by_copy


def call_classmethod(descriptor, cls, *args, **kwargs):
    """Call the classmethod ``descriptor`` (taken from a class ``__dict__``: a Python ``classmethod``
    or a C classmethod descriptor) as ``cls.method(*args, **kwargs)``."""
    return descriptor.__get__(None, cls)(*args, **kwargs)
