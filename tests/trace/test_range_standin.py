"""tracejit's ``range`` stand-in (installed for the tracing thread) answers for range's own members, so
code that reads them while a trace runs (torch 2.15's first import of torch._dynamo reads
``range.__getitem__``) sees the builtin's."""
import torch

import tracejit


def _reads_range_members(x):
    assert range.__getitem__(range(10), 3) == 3 and range.count(range(4), 2) == 1
    assert isinstance(range(2), range)
    return x * sum(range(3))


def test_range_members_read_while_tracing_are_the_builtins():
    traced = tracejit.trace(_reads_range_members, torch.randn(3))
    x = torch.randn(5)
    torch.testing.assert_close(traced(x), x * 3)
