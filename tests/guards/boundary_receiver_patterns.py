"""Boundary patterns, part 5: a traced size handed to a method of a numpy array reached through any expression.

The source scan of trace/numpy_calls.py looked a receiver up again only when it was a name or an attribute chain
(or a numpy function's result), so ``arrs[0].reshape(n, -1)`` froze ``n`` without a guard. The callee is now
decided at run time, when the user's frame is about to call numpy's C method (the profile hook's ``c_call``):
whatever expression gave the array. Each reshapes or repeats a table by a traced size; the line whose guard must
fail is marked ``# @<case name>``. Sources: audio front-ends keeping filter banks in a list or a dict of numpy
arrays (``self.banks[0]``), configs holding numpy tables (``self.cfg.table``), helpers returning arrays,
comprehensions over a list of arrays and small lambdas in preprocessing code.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

TABLES = [np.arange(24.0)]
BY_NAME = {"ramp": np.arange(24.0)}


def make_table():
    return np.arange(24.0)


def numpy_subscript_receiver(x):
    rows = TABLES[0].reshape(x.size(0), -1)  # @numpy_subscript_receiver
    return x * float(rows[0].sum())


def numpy_dict_receiver(x):
    rows = BY_NAME["ramp"].reshape(x.size(0), -1)  # @numpy_dict_receiver
    return x * float(rows[0].sum())


class _Config:
    def __init__(self):
        self.table = np.arange(24.0)


class NumpyAttributeChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = _Config()

    def forward(self, x):
        rows = self.cfg.table.reshape(x.size(0), -1)  # @numpy_attribute_chain
        return x * float(rows[0].sum())


def numpy_helper_result_receiver(x):
    rows = make_table().reshape(x.size(0), -1)  # @numpy_helper_result_receiver
    return x * float(rows[0].sum())


def numpy_comprehension_receiver(x):
    n = x.size(0)
    rows = [t.reshape(n, -1)[0].sum() for t in TABLES]  # @numpy_comprehension_receiver
    return x * float(rows[0])


def numpy_lambda_receiver(x):
    n = x.size(0)
    first_row = (lambda t: t.reshape(n, -1)[0])(TABLES[0])  # @numpy_lambda_receiver
    return x * float(first_row.sum())


def numpy_getattr_receiver(x):
    rows = getattr(TABLES[0], "reshape")(x.size(0), -1)  # @numpy_getattr_receiver
    return x * float(rows[0].sum())


def numpy_repeat_in_subscript(x):
    reps = [np.array([1.0, 2.0])][0].repeat(x.size(0))  # @numpy_repeat_in_subscript
    return x.sum() * float(reps.sum())
