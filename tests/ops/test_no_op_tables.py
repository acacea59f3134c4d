"""No module outside the op registry keeps its own set of op names (issue 24, item 2).

Two scans of tracejit/'s source (AST, not text):
  1. a set / frozenset / tuple / list literal with 2+ qualified ``aten::`` / ``tracejit::`` names is a
     copy of an op fact: the names live in tracejit/ops/ (names.py, convs.py) and the facts in ops/aten.py.
     A dict keyed by op names is a table of *implementations* (a lowering, a kernel) and may stay.
  2. a literal set of 3+ bare ATen names that are all random, or all dropouts, restates ATen's
     nondeterministic_seeded tag: read ops.is_random / ops.is_dropout instead.
The allow-list is reviewed: each entry says why it cannot come from the registry.
"""
import ast
import pathlib
import re

import tracejit
from tracejit import ops

ROOT = pathlib.Path(tracejit.__file__).parent
QUALIFIED = re.compile(r"^(aten|tracejit)::[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?$")
REGISTRY = {ROOT / "ops", ROOT / "ir" / "ops.py"}
ALLOWED = {
    # a fact about onnxscript's torch_lib (which overloads its bare-name entry must not stand for), not ATen
    ("export/lowering.py", "NO_OVERLOAD_FALLBACK"),
}


def _sources():
    for path in sorted(ROOT.rglob("*.py")):
        if not any(path == r or r in path.parents for r in REGISTRY):
            yield path, ast.parse(path.read_text(), str(path))


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
