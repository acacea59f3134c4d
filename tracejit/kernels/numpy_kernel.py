"""A fused run of small elementwise / linear ops, executed with numpy ufuncs on zero-copy views.

PyTorch's dispatcher costs a few microseconds per op; a numpy ufunc on a 16-element array costs
well under one. ``NumpyKernel`` runs a short program (``steps``, built by
passes/numpy_regions.py) on ``Tensor.numpy()`` views of its inputs and returns fresh tensors
(``torch.from_numpy``). It checks every call that the fast path fits: plain CPU float32
tensors that autograd does not track, with at most ``MAX_ELEMENTS`` elements, and the very
constant tensors it was built with; anything else runs the same steps as torch ops (the
fallback), so the answer never depends on which path ran.

A step is ``(op, operands, inplace)``: ``op`` a key of ``NUMPY`` / ``TORCH``, ``operands`` a
list of ``("in", i)`` (kernel argument i), ``("v", j)`` (the result of step j) or
``("s", number)`` (a Python scalar); ``inplace`` says the step may write into its first
operand (a dead intermediate of this kernel).
"""
from __future__ import annotations

import math
import re
import threading

import numpy as np
import torch

try:   # numpy >= 2 keeps the floating-point error state in a context variable (_ignore_fp_errors)
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
except ImportError:   # older numpy
    _ERRSTATE = None

from ..codegen.compiler import compile_function
from .elementwise_costs import MAX_ELEMENTS, SCALAR_POWERS, cost_key
from .numexpr_groups import plan
from .numpy_bias_fold import fold_biases


# op -> numpy statement template over {o} (the result name), {a}, {b}, {c} (operands), {out} (", <a>": write
# into the first operand, or "") and {outk} (", out=<a>" or "": np.maximum / np.minimum take out only by keyword)
NUMPY = {
    "sin": "{o} = _np.sin({a}{out})", "cos": "{o} = _np.cos({a}{out})", "tan": "{o} = _np.tan({a}{out})",
    "tanh": "{o} = _np.tanh({a}{out})", "sinh": "{o} = _np.sinh({a}{out})", "cosh": "{o} = _np.cosh({a}{out})",
    "asin": "{o} = _np.arcsin({a}{out})", "acos": "{o} = _np.arccos({a}{out})", "atan": "{o} = _np.arctan({a}{out})",
    "exp": "{o} = _np.exp({a}{out})", "exp2": "{o} = _np.exp2({a}{out})", "expm1": "{o} = _np.expm1({a}{out})",
    "log": "{o} = _np.log({a}{out})", "log2": "{o} = _np.log2({a}{out})", "log10": "{o} = _np.log10({a}{out})",
    "log1p": "{o} = _np.log1p({a}{out})", "sqrt": "{o} = _np.sqrt({a}{out})", "abs": "{o} = _np.absolute({a}{out})",
    "neg": "{o} = _np.negative({a}{out})", "reciprocal": "{o} = _np.reciprocal({a}{out})",
    "square": "{o} = _np.square({a}{out})", "floor": "{o} = _np.floor({a}{out})", "ceil": "{o} = _np.ceil({a}{out})",
    "trunc": "{o} = _np.trunc({a}{out})",
    "relu": "{o} = _np.maximum(_ZERO, {a}{outk})",   # this order keeps -0.0 and NaN, as torch's relu does
    "rsqrt": "{o} = _np.sqrt({a}{out}); _np.reciprocal({o}, {o})",
    "sigmoid": "{o} = _np.negative({a}{out}); _np.exp({o}, {o}); _np.add({o}, _ONE, {o}); "
               "_np.reciprocal({o}, {o})",
    "add": "{o} = _np.add({a}, {b}{out})", "sub": "{o} = _np.subtract({a}, {b}{out})",
    "mul": "{o} = _np.multiply({a}, {b}{out})", "div": "{o} = _np.true_divide({a}, {b}{out})",
    "pow": "{o} = _np.power({a}, {b}{out})", "rsub": "{o} = _np.subtract({b}, {a}{out})",
    "rpow": "{o} = _np.power({b}, {a}{out})",
    "clamp_min": "{o} = _np.maximum({a}, {b}{outk})", "clamp_max": "{o} = _np.minimum({a}, {b}{outk})",
    "clamp": "{o} = _np.maximum({a}, {b}{outk}); _np.minimum({o}, {c}, out={o})",
    # linear(x, W, bias) as x.dot(W^T) (a view of the constant, made once; ndarray.dot is the cheapest
    # call into BLAS); the product is fresh, so the bias is added into it
    # a 2-D product gets the bias as a (1, n) view ({c}R): numpy adds arrays of equal rank in half the time.
    # ndarray.dot calls BLAS for 2-D operands only (a [1, 16, 64] input took a generic loop, 4x slower than
    # torch: a transformer's linears): other ranks go through matmul, which stacks them into one BLAS call
    "linear": "{o} = {a}.dot({b}T) if {a}.ndim == 2 else _np.matmul({a}, {b}T); "
              "_np.add({o}, {c}R if {o}.ndim == 2 else {c}, {o})",
    "linear_nobias": "{o} = {a}.dot({b}T) if {a}.ndim == 2 else _np.matmul({a}, {b}T)",
}
# the same steps as torch ops (the fallback path), over the same operand names
TORCH = {name: f"{{o}} = torch.{name}({{a}})" for name in (
    "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "acos", "atan", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sqrt", "abs", "neg", "reciprocal", "square", "floor", "ceil", "trunc", "relu", "rsqrt",
    "sigmoid")}
TORCH.update({
    "add": "{o} = {a} + {b}", "sub": "{o} = {a} - {b}", "mul": "{o} = {a} * {b}", "div": "{o} = {a} / {b}",
    "pow": "{o} = {a} ** {b}", "rsub": "{o} = {b} - {a}", "rpow": "{o} = {b} ** {a}",
    "clamp_min": "{o} = torch.clamp_min({a}, {b})", "clamp_max": "{o} = torch.clamp_max({a}, {b})",
    "clamp": "{o} = torch.clamp({a}, {b}, {c})",
    "linear": "{o} = torch._C._nn.linear({a}, {b}, {c})", "linear_nobias": "{o} = torch._C._nn.linear({a}, {b})",
})
# pow by a scalar torch's CPU kernel computes without pow: the same products and reciprocals (a cube
# never writes into its operand: it reads it after the square)
POWERS = {2.0: "{o} = _np.square({a}{out})", 3.0: "{o} = _np.square({a}); _np.multiply({o}, {a}, {o})",
          -1.0: "{o} = _np.reciprocal({a}{out})", -2.0: "{o} = _np.square({a}{out}); _np.reciprocal({o}, {o})",
          -0.5: "{o} = _np.sqrt({a}{out}); _np.reciprocal({o}, {o})"}
assert set(POWERS) == set(SCALAR_POWERS)
_UFUNC = re.compile(r"\b_np\.(\w+)\(")
UNARY = {name for name, text in NUMPY.items() if "{b}" not in text}


def _ignore_fp_errors():
    """(enter, leave) that silence numpy's overflow / invalid warnings around the fast path
    (torch's ops give inf / nan silently). numpy >= 2 keeps the state in a context variable:
    setting it directly costs a fraction of ``np.errstate``."""
    var = _ERRSTATE
    try:
        with np.errstate(all="ignore"):
            quiet = var.get()
        return (lambda: var.set(quiet)), var.reset
    except AttributeError:   # older numpy (var is None): the public (slower) context manager
        def enter():
            state = np.errstate(all="ignore")
            state.__enter__()
            return state
        return enter, (lambda state: state.__exit__(None, None, None))


_QUIET, _LOUD = _ignore_fp_errors()


class NumpyKernel:
    """Runs ``steps`` on ``n_inputs`` tensors and ``len(constants)`` constant tensors; returns the
    results of the steps listed in ``outputs`` (one tensor, or a tuple when there are several).

    Called as ``kernel(*inputs)``; the kernel holds its constants. ``traced.to()`` / ``.double()``
    replace the kernel with ``moved(fn)`` (runtime/constants.py), whose constants are the moved
    tensors and which runs the torch steps when they no longer fit the fast path.
    """

    def __init__(self, steps: list, n_inputs: int, constants: list, outputs: list, label: str = "numpy_region",
                 private=(), elements: int | None = None):
        self.steps, self.n_inputs, self.outputs = steps, n_inputs, outputs
        self.elements = elements   # the tensors' size when traced: what numexpr programs are costed for
        self.constants = list(constants)
        # indices of constants only this program holds and nothing in it writes (frozen copies):
        # their folded copies need no per-call version check
        self.private = frozenset(private)
        self.label = label
        self._scalars: dict = {}
        self._fast = self._fits()   # else (e.g. moved to float64 or another device) torch's steps only
        self._variants = fold_biases(steps, outputs, self.constants) if self._fast else {}
        self._items = plan(steps, outputs, set(self._variants), elements) if self._fast else []
        self._call = self._compile()

    def __call__(self, *args):
        return self._call(*args)

    def moved(self, fn) -> "NumpyKernel":
        """The same kernel over ``fn`` applied to each constant (a ``Module._apply`` conversion)."""
        return NumpyKernel(self.steps, self.n_inputs, [fn(k) for k in self.constants], self.outputs, self.label,
                           self.private, self.elements)

    def _fits(self) -> bool:
        """Do the constants fit the numpy path (plain CPU float32 tensors)?"""
        return all(type(k) in (torch.Tensor, torch.nn.Parameter) and k.dtype is torch.float32 and k.is_cpu
                   and k.layout is torch.strided and not k.is_conj() and not k.is_neg() for k in self.constants)

    @property
    def function(self):
        """The compiled function (what generated code calls; ``.kernel`` leads back here)."""
        return self._call

    def describe(self) -> str:
        return ",".join(step[0] for step in self.steps)

    def _compile(self):
        ins = [f"x{i}" for i in range(self.n_inputs)]
        head = f"def {self.label}({', '.join(ins)}):"
        fallback = [f"def _fallback({', '.join(ins)}):"] + ["    " + line for line in self._body(numpy=False)]
        outs = [f"v{j}" for j in self.outputs]
        fallback.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
        globs = {"_np": np, "torch": torch, "_Tensor": torch.Tensor, "_NP_F32": np.dtype(np.float32),
                 "_from_numpy": torch.from_numpy, "_grad_enabled": torch.is_grad_enabled,
                 "_quiet": _QUIET, "_loud": _LOUD, "_tj_def_name": self.label}
        globs.update({f"_K{i}": k for i, k in enumerate(self.constants)})
        if not self._fast:
            source = "\n".join([head, f"    return _fallback({', '.join(ins)})"] + fallback) + "\n"
            return self._finish(source, globs)
        lines = [head]
        # dtype, device and size are read from the numpy view below (cheaper than asking the tensor);
        # numpy() itself refuses other devices, layouts, tracked and neg-bit tensors
        checks = [f"type({x}) is _Tensor" for x in ins]
        copied = sorted({what for j in self._variants for kind, what in self.steps[j][1] if kind == "k"}
                        - self.private)
        checks += [f"_K{i}._version == {self.constants[i]._version}" for i in copied]   # copies stay current
        if any(k.requires_grad for k in self.constants):   # e.g. frozen parameters: autograd would track
            checks.append("not _grad_enabled()")
        lines.append(f"    if not ({' and '.join(checks) or 'True'}):")
        lines.append(f"        return _fallback({', '.join(ins)})")
        lines.append("    try:")
        lines += [f"        a{i} = {x}.numpy()" for i, x in enumerate(ins)]
        lines.append("    except (RuntimeError, TypeError):   # needs grad, sparse, nested, ...")
        lines.append(f"        return _fallback({', '.join(ins)})")
        if ins:
            fits = " or ".join(f"a{i}.dtype is not _NP_F32 or a{i}.size > {MAX_ELEMENTS} or a{i}.ndim == 0"
                               for i in range(len(ins)))
            lines.append(f"    if {fits}:")
            lines.append(f"        return _fallback({', '.join(ins)})")
        ufuncs = any(item[0] == "step" for item in self._items)   # numexpr programs never warn
        if ufuncs:
            lines.append("    _tok = _quiet()")
        lines.append("    try:")
        lines += ["        " + line for line in self._body(numpy=True)]
        lines.append("    except (ValueError, RuntimeError):   # shapes numpy cannot combine: torch's answer or error")
        lines.append(f"        return _fallback({', '.join(ins)})")
        if ufuncs:
            lines.append("    finally:")
            lines.append("        _loud(_tok)")
        outs = [f"_from_numpy(v{j})" for j in self.outputs]
        lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ',)'}")
        raw = "\n".join(lines + fallback) + "\n"
        source = _UFUNC.sub(r"_np_\1(", raw)   # a global per ufunc: no attribute lookup per call
        globs.update({name: np.array(value[0], dtype=np.float32) for value, name in self._scalars.items()})
        globs["_ZERO"] = np.array(0.0, dtype=np.float32)
        globs["_ONE"] = np.array(1.0, dtype=np.float32)
        for _, arrays in self._variants.values():
            globs.update(arrays)
        for item in self._items:
            if item[0] == "expr":
                globs[f"_NE{item[1]}"], globs[f"_NE{item[1]}_LOCK"] = item[2], threading.Lock()
        globs.update({f"_np_{name}": getattr(np, name) for name in set(_UFUNC.findall(raw))})
        # numpy views of the constants, made once (linear reads W^T as a view: no copy)
        globs.update({f"_C{i}": k.detach().numpy() for i, k in enumerate(self.constants)})
        globs.update({f"_C{i}T": k.detach().numpy().T for i, k in enumerate(self.constants)})
        globs.update({f"_C{i}R": k.detach().numpy().reshape(1, -1) for i, k in enumerate(self.constants)
                      if k.dim() == 1})
        return self._finish(source, globs)

    def _finish(self, source: str, globs: dict):
        fn = compile_function(source, self.label, globs, self.label)
        fn.source = source
        fn.kernel = self
        return fn

    @property
    def source(self) -> str:
        return self._call.source

    def _body(self, numpy: bool) -> list[str]:
        table = NUMPY if numpy else TORCH
        lines = []
        items = self._items if numpy else [("step", j) for j in range(len(self.steps))]
        for item in items:
            j = item[1]
            if item[0] == "expr":   # one numexpr program for a tree of steps (kernels/numexpr_groups.py)
                # a compiled numexpr program keeps its buffers on the object: one thread at a time
                # (pydata/numexpr#569: concurrent calls corrupt the heap)
                lines.append(f"with _NE{j}_LOCK: v{j} = _NE{j}({', '.join(self._operand(o, True) for o in item[3])})")
                continue
            op, operands, inplace = self.steps[j]
            names = [self._operand(o, numpy) for o in operands]
            fields = dict(zip("abc", names))
            fields["o"] = f"v{j}"
            fields["out"] = f", {names[0]}" if numpy and inplace else ""
            fields["outk"] = f", out={names[0]}" if numpy and inplace else ""
            template = self._variants[j][0] if numpy and j in self._variants else table[op]
            if numpy and cost_key(op, operands) == "pow_scalar":
                template = POWERS[float(operands[1][1])]
            lines.append(template.format(**fields))
        return lines

    def _operand(self, operand, numpy: bool) -> str:
        kind, what = operand
        if kind == "in":
            return f"a{what}" if numpy else f"x{what}"
        if kind == "v":
            return f"v{what}"
        if kind == "k":
            return f"_C{what}" if numpy else f"_K{what}"
        if numpy:   # a 0-d float32 array: a Python number costs numpy a conversion per call
            key = (float(what), math.copysign(1.0, what))   # 0.0 == -0.0, yet x * -0.0 is not x * 0.0
            return self._scalars.setdefault(key, f"_S{len(self._scalars)}")
        return repr(float(what)) if isinstance(what, float) else repr(int(what))
