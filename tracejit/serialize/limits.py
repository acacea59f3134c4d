"""Bounds on what a file may ask the loader to do, checked before the work they bound.

Every limit is far above what real programs need (a BERT-large file uses well under 1%
of each) and low enough that a hostile file is refused in milliseconds and megabytes.
A load that hits one raises LoadError naming the limit.
"""
from __future__ import annotations

from ..errors import LoadError

MAX_HEADER = 64 * 1024 * 1024      # bytes of safetensors JSON header (holds the program document)
MAX_DEPTH = 64                     # nesting of the program document
MAX_STRING = 64 * 1024             # characters of one string in the document (extra files excepted)
MAX_JSON_ITEMS = 20_000_000        # values in the whole document
MAX_NODES = 200_000                # nodes in the graph table
MAX_NODE_VISITS = 1_000_000        # nodes checked over all (module, method) pairs (shared graphs count each time)
MAX_MODULES = 100_000
MAX_LEDGER = 100_000               # ledger entries
MAX_EXTRA_FILES = 10_000
ALLOC_FLOOR = 2 ** 25              # elements a node may create from constants, at least ...
ALLOC_PER_FILE_BYTE = 16           # ... or this many per byte of the file


def max_elements(file_size: int) -> int:
    """Elements any one node may size from the file's constants: a fixed multiple of the file."""
    return max(ALLOC_FLOOR, ALLOC_PER_FILE_BYTE * file_size)


def check_document(doc, skip_strings_under: str = "extra_files") -> None:
    """Depth, string length and item count of the parsed program document (iterative: no recursion)."""
    stack = [(doc, 0, False, None)]   # (value, depth, long strings allowed, (parent trail, key))
    items = 0
    while stack:
        x, depth, long_ok, trail = stack.pop()
        items += 1
        if depth > MAX_DEPTH:
            raise LoadError(f"the program document is nested deeper than {MAX_DEPTH} levels (at {_where(trail)})")
        if isinstance(x, str):
            if len(x) > MAX_STRING and not long_ok:
                raise LoadError(f"{_where(trail)}: a string of {len(x)} characters (at most {MAX_STRING}): "
                                f"{x[:40]!r}...")
        elif isinstance(x, dict):
            for k, v in x.items():
                if len(k) > MAX_STRING:
                    raise LoadError(f"{_where(trail)}: a key of {len(k)} characters (at most {MAX_STRING})")
                stack.append((v, depth + 1, long_ok or k == skip_strings_under, (trail, k)))
        elif isinstance(x, list):
            stack.extend((v, depth + 1, long_ok, (trail, i)) for i, v in enumerate(x))
        if items > MAX_JSON_ITEMS:
            raise LoadError(f"the program document holds more than {MAX_JSON_ITEMS} values")


def _where(trail) -> str:
    parts = []
    while trail is not None:
        trail, key = trail
        parts.append(f"[{key}]" if isinstance(key, int) else f".{str(key)[:40]}")
    return "document" + "".join(reversed(parts))


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
