"""A traced size read by C code that bypasses ``__index__`` / ``__int__`` (trace/c_readers.py, hunt20 D).

Traced at size 2, called at size 3: eager's answer follows the size; torch.jit.trace's program (and tracejit's
before) silently kept the trace's value. Now each such read is a guard at its line: the traced object retraces
(eager's answer), a loaded program raises GuardError naming the line. ``pickle`` / ``copy.deepcopy`` of a size
and ``pow(n, e, m)`` crashed the trace; now they are guarded too.
"""
from __future__ import annotations

import array
import collections
import copy
import inspect
import io
import itertools
import pickle
import struct
import warnings

import pytest
import torch

import tracejit
from tracejit.errors import GuardError
from trace_testlib import marker_lines

LINE = marker_lines(inspect.getsourcefile(inspect.currentframe()))
TABLE = list(range(10, 30))


def packed(x):
    return x * struct.pack("<i", x.shape[0])[0]  # @struct


def bounded(x):
    return x * len(collections.deque(range(10), maxlen=x.shape[0]))  # @deque


def sliced(x):
    return x * len(list(itertools.islice(range(10), x.shape[0])))  # @islice


def zero_bytes(x):
    return x * len(bytes(x.shape[0]))  # @bytes


def binary(x):
    return x * len(bin(x.shape[0] + 2))  # @bin


def char(x):
    return x * ord(chr(x.shape[0] + 60))  # @chr


def justified(x):
    return x * len("a".ljust(x.shape[0]))  # @ljust


def inserted(x):
    slots = [1, 2, 3, 4]
    slots.insert(x.shape[0], 9)  # @insert
    return x * slots.index(9)


def numbered(x):
    return x * list(enumerate([5], x.shape[0]))[0][0]  # @enumerate


def repeated(x):
    return x * len(list(itertools.repeat(1, x.shape[0])))  # @repeat


def percent(x):
    return x * len(("%d" % (x.shape[0] * 5)) + "a")  # @percent


def tuple_index(x):
    return x * tuple(TABLE)[x.shape[0]]  # @tuple


def text_index(x):
    return x * int("0123456789"[x.shape[0]])  # @text


def range_index(x):
    return x * range(20, 40)[x.shape[0]]  # @range


def typed_array(x):
    return x * array.array("i", [x.shape[0]])[0]  # @array


def pickled(x):
    return x * pickle.loads(pickle.dumps(x.shape[0]))  # @pickle


def deep_copied(x):
    return x * copy.deepcopy(x.shape[0])  # @deepcopy


def modular_pow(x):
    return x * pow(x.shape[0], 2, 7)  # @pow


def split_count(x):
    return x * len(torch.split(torch.arange(10.0), x.shape[0]))  # @split


def size_numel(x):                       # torch.Size.numel() multiplies the sizes in C (hunt26)
    return torch.zeros(x.shape.numel()) + x.sum()  # @size_numel


CASES = [packed, bounded, sliced, zero_bytes, binary, char, justified, inserted, numbered, repeated, percent,
         tuple_index, text_index, range_index, typed_array, pickled, deep_copied, modular_pow, split_count,
         size_numel]
MARKERS = ["struct", "deque", "islice", "bytes", "bin", "chr", "ljust", "insert", "enumerate", "repeat", "percent",
           "tuple", "text", "range", "array", "pickle", "deepcopy", "pow", "split", "size_numel"]
# eager's answer at size 3 differs from size 2's for each; sizes 2 -> 3 cross bin()'s width (4 -> 5) at + 2
SIZES = {"bin": (6, 9), "percent": (2, 20)}


def _saved(traced):
    buf = io.BytesIO()
    tracejit.save(traced, buf)
    buf.seek(0)
    return tracejit.load(buf)


@pytest.mark.parametrize("fn, marker", list(zip(CASES, MARKERS)), ids=MARKERS)
def test_a_size_read_in_c_is_guarded(fn, marker):
    small, big = SIZES.get(marker, (2, 3))
    x, y = torch.randn(small), torch.randn(big)
    traced = tracejit.trace(fn, (x,))
    torch.testing.assert_close(traced(x), fn(x), rtol=0, atol=0)
    eager = fn(y)
    torch.testing.assert_close(traced(y), eager, rtol=0, atol=0)     # retraced at the failed guard
    with pytest.raises(GuardError, match=rf"test_c_reads.py:{LINE(marker)}\b"):
        _saved(tracejit.trace(fn, (x,)))(y)


@pytest.mark.parametrize("fn, marker", [(packed, "struct"), (sliced, "islice"), (tuple_index, "tuple"),
                                        (percent, "percent"), (size_numel, "size_numel")],
                         ids=["struct", "islice", "tuple", "percent", "size_numel"])
def test_torch_jit_freezes_them_silently(fn, marker):
    small, big = SIZES.get(marker, (2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit = torch.jit.trace(fn, (torch.randn(small),), check_trace=False)
    y = torch.randn(big)
    assert not torch.equal(jit(y), fn(y))


def test_storing_and_asking_keep_the_size_symbolic():
    def fn(x):
        n = x.shape[0]
        parts = [n, n * 2]
        parts.append(n)
        return x.new_zeros(max(parts), min(n, 2) + 1).sum(0) + len(parts) + isinstance(n, int)
    traced = tracejit.trace(fn, (torch.randn(3),))
    loaded = _saved(traced)
    for k in (3, 5):
        y = torch.randn(k)
        torch.testing.assert_close(loaded(y), fn(y), rtol=0, atol=0)


def test_enumerate_only_iterates_the_sizes_it_is_given():
    """torchvision's detection transform: ``for index, item in enumerate(sublist)`` over each image's sizes.
    enumerate never reads its items' digits: the sizes stay symbolic (a loaded program follows new shapes)."""
    def fn(x):
        maxes, sizes = [1, 1], list(x.shape)
        for index, item in enumerate(sizes):
            maxes[index] = max(maxes[index], item)
        return x.new_ones(maxes).sum(0)
    traced = tracejit.trace(fn, (torch.randn(3, 4),))
    loaded = _saved(traced)
    for shape in ((3, 4), (5, 2)):
        y = torch.randn(*shape)
        torch.testing.assert_close(loaded(y), fn(y), rtol=0, atol=0)
