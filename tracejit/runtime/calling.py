"""Calling a generated method: arguments traced as keywords may come by position, and a Python arity
error at the call itself becomes a clear ArgumentTypeError (other errors get the trace's notes)."""
from __future__ import annotations

from ..codegen.compiler import add_trace_notes
from ..errors import ArgumentTypeError, GuardError
from ..ir import Graph


def call_checked(fn, signature: str, args, kwargs, graph: Graph | None = None):
    """Call a generated function; turn a Python arity error at the call itself into a clear TypeError.

    Arguments traced as keywords may also be passed by position, in the order of the traced
    function's parameters (as torch.jit's traced programs take them).
    """
    if graph is not None and args:
        args, kwargs = spread_positional(graph, signature, args, kwargs)
    try:
        return fn(*args, **kwargs)
    except GuardError:
        raise
    except TypeError as e:
        tb = e.__traceback__
        if tb is not None and tb.tb_next is None:
            kw = f"keyword arguments {sorted(kwargs)}" if kwargs else "no keyword arguments"
            raise ArgumentTypeError(f"traced {signature} was called with {len(args)} positional argument(s) "
                                    f"and {kw}: {e}") from None
        add_trace_notes(e)
        raise
    except Exception as e:
        add_trace_notes(e)   # the generated lines it passed and the source lines they were traced from
        raise


def spread_positional(graph: Graph, signature: str, args: tuple, kwargs: dict):
    """Positional arguments beyond those traced positionally go to the keyword-traced parameters, in order."""
    n_pos = len(graph.in_spec.children[0].children)
    if len(args) <= n_pos:
        return args, kwargs
    keyword_names = graph.param_names[n_pos:]
    extra = args[n_pos:]
    if len(extra) > len(keyword_names):
        raise ArgumentTypeError(f"traced {signature} takes at most {len(graph.param_names)} arguments; got "
                                f"{len(args)} positional argument(s)")
    kwargs = dict(kwargs)
    for name, value in zip(keyword_names, extra):
        if name in kwargs:
            raise ArgumentTypeError(f"traced {signature} got multiple values for argument {name!r}")
        kwargs[name] = value
    return args[:n_pos], kwargs
