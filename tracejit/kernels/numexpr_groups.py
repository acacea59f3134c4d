"""Trees of elementwise steps in a numpy kernel, evaluated as one numexpr program each.

A numpy ufunc call on a small array costs about 0.35 µs whatever it computes, so a chain of 60
elementwise ops pays that 60 times. numexpr, the field's library for fused elementwise
expressions, compiles an expression tree into one program for its virtual machine: one call,
one pass over the data. The trees are built from numexpr's expression nodes (never from text,
so nothing is ``eval``-ed) with float32 leaves and float32 constants, so every intermediate is
float32 as in torch; the optimizer is off (``x / 3`` stays a division, as in torch).

``plan(steps, outputs, excluded)`` splits a kernel's steps into items, in step order:

- ``("step", j)``: step j runs as its ufunc statement (kernels/numpy_kernel.py);
- ``("expr", j, program, leaves)``: step j's value is ``program(*leaves)``; the program computes
  step j and every step of its tree, which are not emitted on their own.

A step is inside a tree when its value is read exactly once, by an elementwise step numexpr
can run, and is not a kernel output; every other value is materialized. So each tree is a
proper tree (nothing is computed twice) and its leaves are kernel inputs, constants,
materialized steps (computed earlier) and scalars. A tree becomes a program only when it
replaces at least ``MIN_CALLS`` ufunc calls (a program call costs about three) and, for the number of
elements the kernel saw when traced, its estimated cost is below its ufunc steps' (runtime/
elementwise_costs.py): numexpr saves calls but is slower per element than numpy on every op, by 20-40
ns on ``tanh`` / ``sinh`` / ``tan``, so a program pays for small tensors and short trees of cheap ops only.
``pow`` by 2, 3, -1, -2 or -0.5 is built as torch computes it (products and reciprocals).

``relu`` and ``clamp*`` are written with ``where`` (numexpr computes maximum and minimum in float64,
which would make the whole tree float64); they read their operand more than once, which numexpr
folds into one computation, and a tree that would grow past ``MAX_NODES`` nodes before that
folding, nest deeper than ``MAX_DEPTH`` or read more than ``MAX_LEAVES`` arrays is cut into
several programs. Not in trees: ``trunc`` (float64 in numexpr) and ``linear``; a tree with a ``-0.0`` scalar stays
ufunc steps (numexpr shares one register between constants that compare equal, and 0.0 == -0.0).
Without numexpr installed every item is a ``("step", j)``.
"""
from __future__ import annotations

import math

import numpy as np

from .elementwise_costs import MAX_ELEMENTS, NUMEXPR_CALL_NS, UFUNC_CALL_NS, cost_key, per_element

MIN_CALLS = 4

numexpr = _ne = None   # imported on first use: importing numexpr starts its thread pool


def available() -> bool:
    """Is numexpr importable (a dependency of tracejit; the ufunc path stands in if not)?"""
    global numexpr, _ne
    if numexpr is None:
        try:
            import numexpr as module   # imported by the first numexpr kernel only (6-12 ms after torch, measured)
            from numexpr import expressions   # (numexpr, as above)
        except ImportError:
            return False
        numexpr, _ne = module, expressions
    return True


def _fn(name):
    return lambda a: _ne.functions[name](a)


def _two():
    return _ne.ConstantNode(np.float32(2.0))


def _one():
    return _ne.ConstantNode(np.float32(1.0))


# op -> (builder over operand nodes, ufunc calls the step costs on the ufunc path)
EXPR = {
    **{op: (_fn(op), 1) for op in ("sin", "cos", "tan", "tanh", "sinh", "cosh", "exp", "expm1", "log",
                                   "log2", "log10", "log1p", "sqrt", "abs", "floor", "ceil")},
    "asin": (_fn("arcsin"), 1), "acos": (_fn("arccos"), 1), "atan": (_fn("arctan"), 1),
    "exp2": (lambda a: _two() ** a, 1),
    "neg": (lambda a: -a, 1),
    "reciprocal": (lambda a: _one() / a, 1),
    "square": (lambda a: a * a, 1),   # numexpr's a ** 2 is off by an ulp on some values; torch multiplies
    "rsqrt": (lambda a: _one() / _ne.functions["sqrt"](a), 2),
    "sigmoid": (lambda a: _one() / (_one() + _ne.functions["exp"](-a)), 4),
    "add": (lambda a, b: a + b, 1), "sub": (lambda a, b: a - b, 1),
    "mul": (lambda a, b: a * b, 1), "div": (lambda a, b: a / b, 1),
    "pow": (lambda a, b: a ** b, 1),
    "rsub": (lambda a, b: b - a, 1), "rpow": (lambda a, b: b ** a, 1),
    # these read their first operand more than once (numexpr folds the repeated subtree into one)
    "relu": (lambda a: _where(a < _zero(), _zero(), a), 1),
    "clamp_min": (lambda a, lo: _where(a < lo, lo, a), 1),
    "clamp_max": (lambda a, hi: _where(a > hi, hi, a), 1),
    "clamp": (lambda a, lo, hi: _where(_where(a < lo, lo, a) > hi, hi, _where(a < lo, lo, a)), 2),
}
COPIES = {"square": 2, "relu": 2, "clamp_min": 2, "clamp_max": 2, "clamp": 4}   # how often the first operand is built
MAX_NODES = 1000   # a tree that would build more nodes than this (before numexpr folds repeats) is cut
MAX_DEPTH = 150    # ... or nest deeper (numexpr's compiler recurses a few frames per level)
MAX_LEAVES = 100   # ... or read more arrays (its VM has 255 registers for inputs, constants and temporaries)


def _where(cond, a, b):
    return _ne.functions["where"](cond, a, b)


def _zero():
    return _ne.ConstantNode(np.float32(0.0))


def plan(steps: list, outputs: list, excluded: set, elements: int | None = None) -> list:
    """The kernel's items (see the module docstring); ``excluded`` steps always stay ufunc steps.
    ``elements``: the size of the kernel's tensors when traced (None: unknown, costed at the largest
    size the numpy path takes, ``elementwise_costs.MAX_ELEMENTS``)."""
    if not available():
        return [("step", j) for j in range(len(steps))]
    eligible = [op in EXPR and j not in excluded and all(k != "v" or w not in excluded for k, w in operands)
                for j, (op, operands, _) in enumerate(steps)]
    readers: dict[int, list] = {}
    for j, (_, operands, _) in enumerate(steps):
        for kind, what in operands:
            if kind == "v":
                readers.setdefault(what, []).append(j)
    inner = {j for j in range(len(steps)) if eligible[j] and j not in outputs
             and len(readers.get(j, ())) == 1 and eligible[readers[j][0]]}
    _bound_trees(steps, inner)
    items, inside = [], set()
    for j in reversed(range(len(steps))):
        if j in inside:
            continue
        tree = _tree(steps, j, inner) if eligible[j] else [j]
        program = None
        if len(tree) > 1 and sum(EXPR[steps[t][0]][1] for t in tree) >= MIN_CALLS \
                and _program_pays(steps, tree, elements):
            program = _program(steps, j, inner)
        if program is None:
            items.append(("step", j))
        else:
            inside.update(tree)
            items.append(("expr", j) + program)
    items.reverse()
    return items


def _program_pays(steps: list, tree: list, elements: int | None) -> bool:
    """Is ``tree`` estimated cheaper as one numexpr program than as its ufunc steps at ``elements``?
    A step without a measured cost on either path keeps the tree as ufunc steps (default-deny)."""
    if elements is None:
        elements = MAX_ELEMENTS
    program, ufuncs = float(NUMEXPR_CALL_NS), 0.0
    for t in tree:
        op, operands, _ = steps[t]
        key = cost_key(op, operands)
        ne, np_ = per_element(key, "numexpr"), per_element(key, "numpy")
        if ne is None or np_ is None:
            return False
        program += ne * elements
        ufuncs += UFUNC_CALL_NS * EXPR[op][1] + np_ * elements
    return program < ufuncs


def _scalar_power(a, exponent: float):
    """``a ** exponent`` for one of elementwise_costs.SCALAR_POWERS, as torch's CPU kernel computes it."""
    if exponent == 2.0:
        return a * a
    if exponent == 3.0:
        return a * a * a
    if exponent == -1.0:
        return _one() / a
    if exponent == -2.0:
        return _one() / (a * a)
    return _one() / _ne.functions["sqrt"](a)   # -0.5


def _bound_trees(steps: list, inner: set) -> None:
    """Materialize the operands of a step whose tree would pass a bound (nodes built before numexpr
    folds repeats, depth: its compiler recurses, leaves: its VM has 255 registers)."""
    size: dict[int, tuple] = {}   # step -> (nodes, depth, leaves)
    for j, (op, operands, _) in enumerate(steps):
        nodes, depth, leaves = 1, 1, 0
        for i, (kind, what) in enumerate(operands):
            if kind == "v" and what in inner:
                n, d, lv = size[what]
                copies = (3 if cost_key(op, operands) == "pow_scalar" else COPIES.get(op, 1)) if i == 0 else 1
                nodes, depth, leaves = nodes + n * copies, max(depth, d + 1), leaves + lv * copies
            elif kind != "s":
                leaves += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH or leaves > MAX_LEAVES:
            inner.difference_update(w for k, w in operands if k == "v")
            nodes, depth, leaves = 1, 1, sum(1 for k, _ in operands if k != "s")
        size[j] = (nodes, depth, leaves)


def _tree(steps: list, root: int, inner: set) -> list:
    """The root and every inner step its value is built from."""
    out, todo = [], [root]
    while todo:
        j = todo.pop()
        out.append(j)
        todo += [what for kind, what in steps[j][1] if kind == "v" and what in inner]
    return out


def _program(steps: list, root: int, inner: set) -> tuple:
    """(compiled numexpr program, its leaf operands in argument order), or None when numexpr would
    not compute the tree in float32 or cannot compile it (its VM has 255 registers)."""
    leaves: list = []

    def leaf(operand):
        if operand not in leaves:
            leaves.append(operand)
        return _ne.VariableNode(f"x{leaves.index(operand)}", "float")

    def node(j):
        op, operands, _ = steps[j]
        args = []
        for operand in operands:
            kind, what = operand
            if kind == "v" and what in inner:
                args.append(node(what))
            elif kind == "s":
                if what == 0 and math.copysign(1.0, what) < 0:
                    # numexpr keeps one register per constant value, and 0.0 == -0.0: x * -0.0 would
                    # read 0.0 where the tree also holds a 0.0 (1 / it: inf for -inf)
                    raise ValueError("-0.0 in a numexpr tree")
                args.append(_ne.ConstantNode(np.float32(what)))
            else:
                args.append(leaf(operand))
        if cost_key(op, operands) == "pow_scalar":
            return _scalar_power(args[0], float(operands[1][1]))
        return EXPR[op][0](*args)

    try:   # numexpr's compiler (and node above) recurse; its VM has 255 registers and a buffer limit
        expression = node(root)
        if expression.astKind != "float":
            return None
        signature = [(f"x{i}", float) for i in range(len(leaves))]
        program = numexpr.NumExpr(expression, signature, optimization="none")
    except (ValueError, TypeError, KeyError, NotImplementedError, RuntimeError):   # RecursionError too
        return None
    return program, leaves
