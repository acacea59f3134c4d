"""A traced method's signature as text: ``forward(x: Tensor[4d], pair: (Tensor[2d], Tensor[2d]), flag=True)``.

Read from the graph alone (its input spec, leaves and parameter names): the runtime prints it in argument
errors, ``tracejit inspect`` and the viewer with their own leaf formats."""
from __future__ import annotations

from ..ir import Graph, Value


def signature_text(name: str, graph: Graph, leaf_text=None) -> str:
    """``forward(x: Tensor[4d], pair: (Tensor[2d], Tensor[2d]), flag=True)``.

    ``leaf_text`` formats one input leaf (a Value or a constant); the default shows ranks.
    """
    leaf_text = leaf_text or _rank_text
    args_spec, kwargs_spec = graph.in_spec.children
    leaves = iter(graph.input_leaves)
    parts = []
    for pname, spec in zip(graph.param_names, list(args_spec.children) + list(kwargs_spec.children)):
        mine = [next(leaves) for _ in range(spec.num_leaves)]
        if spec.kind == "leaf" and not isinstance(mine[0], Value):
            parts.append(f"{pname}={mine[0]!r}")
        else:
            parts.append(f"{pname}: {spec.describe(leaf_text(x) for x in mine)}")
    return f"{name}({', '.join(parts)})"


def _rank_text(leaf) -> str:
    if isinstance(leaf, Value):
        return f"Tensor[{len(leaf.type.shape)}d]" if hasattr(leaf.type, "shape") else str(leaf.type)
    return repr(leaf)
