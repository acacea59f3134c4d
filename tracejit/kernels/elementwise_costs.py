"""What one elementwise step costs on each path, for the passes that choose a path by cost.

Measured on CPU float32 with one thread (``bench/bench_elementwise_costs.py`` prints the table again on
another machine): a fixed cost per call and a cost per element, in nanoseconds, for

- ``torch``: the op as a torch call (what the traced program runs);
- ``numpy``: the op as its numpy ufunc statement inside a numpy kernel (kernels/numpy_kernel.py);
- ``numexpr``: the op as one node of a numexpr program (kernels/numexpr_groups.py).

numexpr saves calls (one call per tree instead of one per ufunc), but every op costs more per element
than numpy's SIMD loops, by 0.1-0.3 ns for arithmetic and by 20-40 ns for ``tanh``, ``sinh`` and ``tan``
(numexpr 2.14 without VML): a tree of the tanh-GELU at 4096 elements cost 117 us as one program,
10 us as ufuncs and 24 us as torch ops. So each path is costed for the size the trace saw.

Default-deny: an op missing from a table has no measured cost on that path; the passes do not move it
there (``None``).
"""
from __future__ import annotations

MAX_ELEMENTS = 4096       # a numpy kernel's largest tensor: above this, torch's vectorized multi-threaded kernels win
TORCH_CALL_NS = 1300      # a torch op through the dispatcher (1.2-3 us measured; the low end)
KERNEL_CALL_NS = 1300     # a numpy kernel's entry and exit (its result's from_numpy), whatever it reads
INPUT_NS = 600            # each tensor a numpy kernel reads: its type, dtype and size checks and its .numpy() view
# (measured: 1 input and 2 steps 2.5 us, 5 inputs and 6 steps 6.3 us; a constant the kernel holds costs nothing.
# A Mistral rotary embedding, q * cos + rotate_half(q) * sin: 5 inputs, 3 steps, 9.0 us as a kernel against
# 5.3 us as torch ops, was fused when the kernel's entry was costed at a flat 2 us)
UFUNC_CALL_NS = 350       # one numpy ufunc call on a small array
NUMEXPR_CALL_NS = 700     # one numexpr program call

# op -> ns per element, (torch, numpy, numexpr); None: not measured on that path
PER_ELEMENT_NS = {
    "abs": (0.11, 0.14, 1.45), "acos": (3.9, 2.9, 5.1), "asin": (3.8, 2.9, 4.6), "atan": (2.5, 0.47, 5.1),
    "ceil": (0.10, 0.13, 1.5), "floor": (0.10, 0.12, 1.5), "trunc": (0.10, 0.13, None),
    "cos": (1.4, 0.58, 2.3), "sin": (1.3, 0.58, 2.5), "tan": (1.8, 0.45, 27.0),
    "cosh": (1.4, 0.39, 5.4), "sinh": (1.4, 0.41, 44.0), "tanh": (2.6, 0.41, 22.0),
    "exp": (0.86, 0.55, 2.2), "exp2": (0.5, 0.5, 4.3), "expm1": (1.3, 0.92, 7.5),
    "log": (1.1, 0.44, 2.4), "log2": (1.0, 0.92, 2.4), "log10": (1.1, 0.5, 5.0), "log1p": (0.83, 0.88, 7.1),
    "sqrt": (0.46, 0.41, 1.5), "rsqrt": (0.33, 0.62, 2.3), "reciprocal": (0.13, 0.25, 0.33),
    "square": (0.31, 0.12, 4.35), "neg": (0.06, 0.13, 0.24), "relu": (0.26, 0.43, 0.97),
    "sigmoid": (0.45, 0.87, 3.4),
    "add": (0.12, 0.15, 0.41), "sub": (0.12, 0.11, 0.36), "mul": (0.12, 0.11, 0.38), "div": (0.13, 0.16, 0.36),
    "rsub": (0.12, 0.11, 0.36),
    "clamp": (0.09, 0.85, 1.85), "clamp_min": (0.11, 0.44, 0.9), "clamp_max": (0.10, 0.45, 1.0),
    "pow": (2.6, 1.2, 4.3), "rpow": (2.5, 1.8, 4.3),
    # pow by one of SCALAR_POWERS: products and reciprocals on every path, as torch computes them
    "pow_scalar": (0.3, 0.3, 0.8),
}
# the scalar exponents torch's CPU pow computes without pow (ATen's PowKernel): the kernels do the same,
# so their answer is torch's to the bit (np.power(x, 3.0) is not x * x * x, and takes ~250 ns per
# negative element); any other scalar exponent stays a torch op
SCALAR_POWERS = (2.0, 3.0, -1.0, -2.0, -0.5)
# the steps whose numpy ufunc statement (kernels/numpy_kernel.py) and numexpr node (numexpr_groups.py) give
# torch's CPU float32 answer to the bit, signed zeros and NaNs included (tests/passes/test_bit_exact_ops.py
# checks each on ~1M values over every range and the special values): IEEE arithmetic, rounding, comparisons,
# reciprocals and pow by SCALAR_POWERS as torch computes it. The transcendentals (exp, log, tanh, sigmoid, sin,
# ...: numpy's and numexpr's float32 loops are 1-4 ulps from torch's) and sqrt (torch's float32 sqrt is not
# correctly rounded on this CPU; numpy's is) stay torch ops, so an optimized program is as exact as torch.jit's
# freeze (issue #25 item 3). Default-deny: a step not listed here is never moved out of torch.
BIT_EXACT = frozenset({
    "abs", "neg", "reciprocal", "square", "rsqrt", "floor", "ceil", "trunc", "relu",
    "add", "sub", "mul", "div", "rsub", "clamp", "clamp_min", "clamp_max", "pow_scalar",
})
# a linear's product is BLAS on either path; the numpy path saves the dispatcher (1.3 vs 2.6 us measured)
LINEAR_CALL_NS = {"torch": 2600, "numpy": 1300}


def cost_key(op: str, operands: list) -> str:
    """The table's key for a step: ``pow`` by one of ``SCALAR_POWERS`` is costed as ``pow_scalar``.
    ``operands``: the step's operands, a scalar as ``("s", value)`` or a plain number."""
    if op == "pow" and len(operands) == 2:
        b = operands[1]
        value = b[1] if isinstance(b, tuple) and b[0] == "s" else b
        if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) in SCALAR_POWERS:
            return "pow_scalar"
    return op


def per_element(op: str, path: str):
    """ns per element of ``op`` on ``path`` ("torch", "numpy" or "numexpr"), or None when not measured."""
    costs = PER_ELEMENT_NS.get(op)
    return None if costs is None else costs[("torch", "numpy", "numexpr").index(path)]


def torch_ns(ops: list, elements: int):
    """Estimated ns of ``ops`` (names) as torch calls on tensors of ``elements`` elements; None if unknown."""
    return _path_ns(ops, "torch", elements, 0.0, lambda op: TORCH_CALL_NS)


def numpy_kernel_ns(ops: list, calls: dict, elements: int, inputs: int = 1):
    """Estimated ns of ``ops`` as one numpy kernel of ufunc statements reading ``inputs`` tensors (``calls``:
    ufunc calls per op, 1 when absent); None if an op has no measured numpy cost."""
    return _path_ns(ops, "numpy", elements, float(KERNEL_CALL_NS + INPUT_NS * inputs),
                    lambda op: UFUNC_CALL_NS * calls.get(op, 1))


def _path_ns(ops: list, path: str, elements: int, total: float, call_ns):
    """``total`` plus each op's cost on ``path``: its call (``call_ns(op)``) and its elements; None if an op
    has no measured cost there (default-deny)."""
    for op in ops:
        if op in ("linear", "linear_nobias"):
            total += LINEAR_CALL_NS[path]
            continue
        ns = per_element(op, path)
        if ns is None:
            return None
        total += call_ns(op) + ns * elements
    return total
