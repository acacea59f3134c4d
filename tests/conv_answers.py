"""A conv test net's optimized program against eager on new inputs (tests/conftest.py puts tests/ on sys.path):
shared by tests/passes/test_blocked_timing.py and tests/backends/test_region_choice.py."""
from __future__ import annotations

import torch


def assert_eager_answers_on_new_images(net, program) -> None:
    """``program`` gives ``net``'s answer on two new batch sizes and image sizes (3 channels), without autograd."""
    gen = torch.Generator().manual_seed(3)
    for shape in [(2, 3, 40, 56), (1, 3, 64, 48)]:
        x = torch.randn(shape, generator=gen)
        with torch.no_grad():
            want, got = net(x), program(x)
        assert want.abs().max() > 0.1   # the input moves the output
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
