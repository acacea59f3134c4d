"""Bounds on what a file may ask the loader to do, checked before the work they bound.

Every limit is far above what real programs need (a BERT-large file uses well under 1%
of each) and low enough that a hostile file is refused in milliseconds and megabytes.
A load that hits one raises LoadError naming the limit.
"""
from __future__ import annotations

from ..errors import LoadError

MAX_HEADER = 16 * 1024 * 1024      # bytes of safetensors JSON header: the program document and extra files
MAX_DEPTH = 32                     # nesting of arguments, constants and structures (JSON's parser stops at ~1000)
MAX_STRING = 4096                  # characters of a kept string (source locations, ledger); names: 200
MAX_JSON_ITEMS = 500_000           # values in the program document (counted before it is parsed)
MAX_NODES = 50_000                 # nodes in the graph table
MAX_NODE_VISITS = 200_000          # nodes checked over all (module, method) pairs (shared graphs count each time)
MAX_MODULES = 100_000
MAX_TENSORS = 100_000              # entries of the safetensors header
MAX_LEDGER = 100_000               # ledger entries
MAX_EXTRA_FILES = 10_000
ALLOC_FLOOR = 2 ** 25              # elements a node may create from constants, at least ...
ALLOC_PER_FILE_BYTE = 16           # ... or this many per byte of the file
EXPANDED_FLOOR = 50_000            # nodes (and values) all calls may expand to, at least ...
EXPANDED_PER_NODE = 64             # ... or this many per stored node (serialize/expansion.py)
EXPANDED_MAX = 4_000_000           # and never more


def max_elements(file_size: int) -> int:
    """Elements any one node may size from the file's constants: a fixed multiple of the file."""
    return max(ALLOC_FLOOR, ALLOC_PER_FILE_BYTE * file_size)


def max_expanded(stored_nodes: int) -> int:
    """What a program's calls may expand to, and what its module paths may name: a multiple of its
    stored nodes (serialize/expansion.py)."""
    return min(EXPANDED_MAX, max(EXPANDED_FLOOR, EXPANDED_PER_NODE * stored_nodes))


def check_header_text(raw: bytes) -> None:
    """Bound the values of the safetensors header before parsing it: its tensor entries (about
    eight values each) and the program document, which it holds as one string."""
    n = raw.count(b",") + raw.count(b"[") + raw.count(b"{")
    if n > MAX_JSON_ITEMS + 8 * MAX_TENSORS:
        raise LoadError(f"the file header holds about {n} values (at most {MAX_JSON_ITEMS + 8 * MAX_TENSORS})")


def check_document_text(text: str) -> None:
    """Bound the values in the program document before parsing it (parsing costs ~1 us per value).
    Counts separators and brackets (those inside strings too: an over-estimate, never an under-)."""
    n = text.count(",") + text.count("[") + text.count("{")
    if n > MAX_JSON_ITEMS:
        raise LoadError(f"the program document holds about {n} values (at most {MAX_JSON_ITEMS})")


def text(x, where: str, limit: int = MAX_STRING) -> str:
    """A string the loader keeps (source file names, ledger messages): a str of bounded length."""
    if not isinstance(x, str):
        raise LoadError(f"{where}: expected a string, found {type(x).__name__}")
    if len(x) > limit:
        raise LoadError(f"{where}: a string of {len(x)} characters (at most {limit}): {x[:40]!r}...")
    return x


LEDGER_VALUE_DEPTH = 10               # nesting of a ledger value (save writes at most 9 levels: archive._jsonable)


def ledger_value(v, where: str, depth: int = 0):
    """A ledger entry's ``value`` (the value a trace froze, shown by ``inspect`` and the viewer): JSON of
    bounded shape, ``None`` / bool / int / float / a string of at most MAX_STRING characters / a list of such,
    nested at most LEDGER_VALUE_DEPTH deep (a crafted megabyte string or deep nesting is refused here, not
    carried into every tool that prints the ledger)."""
    if depth > LEDGER_VALUE_DEPTH:
        raise LoadError(f"{where}: nested more than {LEDGER_VALUE_DEPTH} levels deep")
    if v is None or isinstance(v, (bool, int, float)):
        return v
    if isinstance(v, str):
        return text(v, where)
    if isinstance(v, list):
        return [ledger_value(x, where, depth + 1) for x in v]
    raise LoadError(f"{where}: expected null, a number, a string or a list, found {type(v).__name__}")


def check_program(program: dict) -> None:
    """Counts of the program's tables, before any of them is decoded."""
    graphs = program.get("graphs")
    if isinstance(graphs, list):
        n = sum(len(g["nodes"]) for g in graphs if isinstance(g, dict) and isinstance(g.get("nodes"), list))
        if n > MAX_NODES:
            raise LoadError(f"the program has {n} nodes (at most {MAX_NODES})")
    _at_most(program.get("modules"), MAX_MODULES, "modules")
    _at_most(program.get("ledger"), MAX_LEDGER, "ledger entries")
    _at_most(program.get("extra_files"), MAX_EXTRA_FILES, "extra files")


def check_visits(program: dict) -> None:
    """Shared graphs are checked per module: bound the product (many modules x one big graph)."""
    graphs, modules = program.get("graphs"), program.get("modules")
    if not isinstance(graphs, list) or not isinstance(modules, list):
        return
    sizes = [len(g["nodes"]) if isinstance(g, dict) and isinstance(g.get("nodes"), list) else 0 for g in graphs]
    total = 0
    for m in modules:
        for pair in (m.get("methods") or []) if isinstance(m, dict) and isinstance(m.get("methods"), list) else []:
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], int) and 0 <= pair[1] < len(sizes):
                total += sizes[pair[1]]
        if total > MAX_NODE_VISITS:
            raise LoadError(f"the modules' methods add up to more than {MAX_NODE_VISITS} nodes to check")


def _at_most(x, limit: int, what: str) -> None:
    if isinstance(x, (list, dict)) and len(x) > limit:
        raise LoadError(f"the program has {len(x)} {what} (at most {limit})")
