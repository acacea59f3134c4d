"""No module outside the op registry keeps its own set of op names (issue 24, item 2).

Two scans of tracejit/'s source (AST, not text):
  1. a set / frozenset / tuple / list literal with 2+ qualified ``aten::`` / ``tracejit::`` names is a
     copy of an op fact: the names live in tracejit/ops/ (names.py, convs.py) and the facts in ops/aten.py.
     A dict keyed by op names is a table of *implementations* (a lowering, a kernel) and may stay.
  2. a literal set of 3+ bare ATen names that are all random, or all dropouts, restates ATen's
     nondeterministic_seeded tag: read ops.is_random / ops.is_dropout instead.
  3. any set / tuple / list literal of 3+ strings that are all bare ATen op names ("relu", "conv2d"): an op
     table written by hand. The ones that exist are listed in BARE_TABLES, each with what it is: an
     implementation table (which ops a kernel / lowering / backend implements) or Python-level names; no
     fact table is left (the 18 of issue #24 became registry predicates: tests/ops/test_derived_tables.py).
     The list only shrinks: a new table fails the test.
     The rule for what may stay: a fact about an ATen op (pointwise, a view, fresh memory, random, ...) is
     the registry's, derived from torch's tags and schemas or one reviewed entry of ops/overrides.py; a fact
     about one backend or kernel (how onnxruntime treats NaN, what oneDNN fuses, what numexpr evaluates) is
     that backend's implementation table and stays in its module, listed here as "implementation" / "backend".
The allow-lists are reviewed: each entry says why it cannot come from the registry (yet).
"""
import ast
import functools
import pathlib
import re

import torch

import tracejit
from tracejit import ops

ROOT = pathlib.Path(tracejit.__file__).parent
QUALIFIED = re.compile(r"^(aten|tracejit)::[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?$")
REGISTRY = {ROOT / "ops", ROOT / "ir" / "ops.py"}
ALLOWED = {
    # a fact about onnxscript's torch_lib (which overloads its bare-name entry must not stand for), not ATen
    ("export/torch_lib_lookup.py", "NO_OVERLOAD_FALLBACK"),
}


# (file, the name the literal is assigned to, or its first three names) -> what it is
BARE_TABLES = {
    # implementation tables: what one kernel / lowering / emitter / backend implements or computes, not a fact
    # about the ATen op (torch cannot state it; the backend's module is where it is measured and kept)
    ("backends/fallback.py", "NONFINITE_DIFFERS"): "backend: ops onnxruntime computes otherwise than torch on "
                                                   "NaN / inf (measured by running edge values through both)",
    ("kernels/onednn_activation.py", "NAN_TO_NUMBER"): "backend: activations oneDNN computes as max / clip, "
                                                       "turning NaN into numbers",
    ("export/view_writes.py", "_INVERSES"): "implementation: the views whose write-back ONNX export implements, "
                                             "and how (the reshape-like ones: a reshape back)",
    ("kernels/numexpr_groups.py", "EXPR"): "implementation: the functions numexpr evaluates",
    ("kernels/numpy_kernel.py", "TORCH"): "implementation: steps the numpy kernel runs as torch calls",
    ("passes/numpy_regions.py", "_SCALAR_BINARY"): "implementation: binary steps with a scalar operand",
    ("passes/decisions.py", "SOURCES"): "implementation: the ops whose rounding the inference passes outside "
                                        "EXACT_PASSES rewrite (folds, weight layouts, kernels)",
    ("migrate/aten_call.py", "slice,select,index"): "implementation: ATen calls emitted as Python indexing",
    ("trace/symfloat.py", "_OVERLOADS"): "implementation: int/float overloads of size arithmetic it records",
    ("serialize/op_sizes_values.py", "SPLITS"): "implementation: the split ops whose piece count the loader's "
                                                 "PIECES rule computes from each one's own arguments (_pieces)",
    # not tensor ops: Python-level names that happen to share an ATen op's name
    ("trace/index_reads.py", "_SAFE_CALLS"): "Python calls an index expression may make (x.size(), len())",
    ("trace/reads.py", "_COMPARISONS"): "Python comparison operators (operator.lt, ...)",
    ("trace/rng_record.py", "_GENERATOR_ALLOWED"): "torch.Generator methods",
    ("trace/c_readers.py", "PASSES"): "Python builtins and C methods (list.append, max, operator.mul) that store a "
                                      "traced size or ask its own methods: not tensor ops (hunt20)",
}


@functools.lru_cache(maxsize=None)
def _is_aten_name(name: str) -> bool:
    try:
        return isinstance(getattr(torch.ops.aten, name), torch._ops.OpOverloadPacket)
    except (AttributeError, RuntimeError):
        return False


def _bare_tables():
    """{(file, owner or first three names): line} of every literal of 3+ bare ATen op names."""
    found = {}
    for path, tree in _sources():
        rel = path.relative_to(ROOT).as_posix()
        for owner, node in _literals(tree):
            names = _strings(node)
            if len(names) >= 3 and len(names) == len(node.elts) and all(_is_aten_name(n) for n in names):
                found.setdefault((rel, owner or ",".join(names[:3])), node.lineno)
    return found


@functools.lru_cache(maxsize=None)
def _sources():
    """(path, AST) of every module outside the registry, parsed once for the scans."""
    return tuple((path, ast.parse(path.read_text(), str(path))) for path in sorted(ROOT.rglob("*.py"))
                 if not any(path == r or r in path.parents for r in REGISTRY))


def _literals(tree):
    """(name it is assigned to or "", literal node) for each set / frozenset / tuple / list literal."""
    owner = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for sub in ast.walk(node.value):
                owner[id(sub)] = ",".join(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
            yield owner.get(id(node), ""), node


def _strings(node):
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def test_no_module_spells_a_set_of_qualified_op_names():
    found = []
    for path, tree in _sources():
        rel = path.relative_to(ROOT).as_posix()
        for owner, node in _literals(tree):
            names = [s for s in _strings(node) if QUALIFIED.match(s)]
            if len(names) >= 2 and (rel, owner) not in ALLOWED:
                found.append(f"{rel}:{node.lineno} {owner or '(literal)'}: {names[:4]}")
    assert found == [], "op-name sets outside tracejit/ops/ (use ops.names / ops.aten):\n" + "\n".join(found)


def test_no_module_restates_which_ops_are_random():
    found = []
    for path, tree in _sources():
        for owner, node in _literals(tree):
            names = _strings(node)
            if len(names) >= 3 and len(names) == len(node.elts) and (
                    all(ops.is_random(n) for n in names) or all(ops.is_dropout(n) for n in names)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {owner}: {names[:4]}")
    assert found == [], "random-op lists outside tracejit/ops/ (use ops.is_random / ops.draws_random):\n" + \
        "\n".join(found)


def test_the_scans_would_catch_a_copy(tmp_path):
    """The scans are not vacuous: the lists this change removed are caught."""
    old = ast.parse('_R = {"rand", "randn", "bernoulli_"}\nCONVS = ("aten::conv2d.default", "aten::conv2d.padding")')
    literals = list(_literals(old))
    assert all(ops.is_random(n) for n in _strings(literals[0][1]))
    assert [s for s in _strings(literals[1][1]) if QUALIFIED.match(s)] == ["aten::conv2d.default",
                                                                           "aten::conv2d.padding"]


def test_allow_list_entries_still_exist():
    for rel, owner in ALLOWED:
        tree = ast.parse((ROOT / rel).read_text())
        assert any(o == owner for o, _ in _literals(tree)), f"{rel} no longer defines {owner}: drop it from ALLOWED"


def test_no_new_hand_written_table_of_bare_op_names():
    found = _bare_tables()
    new = sorted(f"{rel}:{line} {owner}" for (rel, owner), line in found.items() if (rel, owner) not in BARE_TABLES)
    assert new == [], ("tables of bare op names outside tracejit/ops/ (ask the registry, tracejit.ops, or list it "
                       "in BARE_TABLES with its reason):\n" + "\n".join(new))
    gone = sorted(f"{rel} {owner}" for rel, owner in BARE_TABLES if (rel, owner) not in found)
    assert gone == [], "BARE_TABLES entries no longer in the source: drop them (the list only shrinks):\n" + \
        "\n".join(gone)


def test_the_bare_name_scan_would_catch_a_copy():
    literals = [n for _, n in _literals(ast.parse('LAYOUT = {"relu", "gelu", "tanh"}\nNOT = ("x", "y", "z")'))]
    assert [all(_is_aten_name(s) for s in _strings(n)) for n in literals] == [True, False]
