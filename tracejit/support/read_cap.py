"""The elements a guard of a loaded program may read into Python objects.

A guard that compares a tensor's values with the trace's (``x.tolist() == [...]``, a call guard repeating
``x.tolist()`` / ``x.numpy()`` / ``np.asarray(x)``) turns every element into a Python object (about 60 bytes
each): an input of 10^8 elements within the call's size budget would become 6 GB of lists. The guard can only
pass when the tensor holds as many elements as the value it compares with, so a loaded program reads at most
that many (the file holds them: bounded by its size); a bigger tensor is a GuardError before any read
(codegen/guards.py emits the test for programs with a call budget: loaded from a file or migrated).
"""
from __future__ import annotations

# call guards (``kind:name``, trace/boundary.py) that copy every element of their tensor into Python objects
ELEMENT_READS = frozenset(("method:tolist", "method:numpy", "method:__array__"))


def reads_elements(test: str, call) -> bool:
    """Does a guard of this test (and call) read every element of its first operand into Python?"""
    return test == "tolist" or (test == "call" and call in ELEMENT_READS)


def leaves(v) -> int:
    """The numbers in a guard's expected value (a nested list of them, or one); at least 1."""
    if isinstance(v, (list, tuple)):
        return max(1, sum(leaves(x) for x in v))
    return 1


def read_cap(t, most: int) -> str:
    """What a guard's failure reports as the value now, for a tensor too big for the guard that reads it (called
    only when it is): the guard fails (the generated code's ``_tj_guard``, naming the line and the trace's
    value) without turning the elements into Python objects."""
    return (f"a tensor of {t.numel()} elements (shape {list(t.shape)}), not read: the guard compares {most} "
            "values")
