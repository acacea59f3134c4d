"""The docstring examples of the public API run and print what they say."""
import doctest
import importlib

import pytest

MODULES = ["tracejit", "tracejit.api", "tracejit.pytree", "tracejit.runtime.traced", "tracejit.runtime.late_hooks", "tracejit.program", "tracejit.patch",
           "tracejit.porting", "tracejit.kernels.onednn_conv", "tracejit.kernels.onednn_linear", "tracejit.passes.paired_timing", "tracejit.passes.linear_timing", "tracejit.passes.blocked_timing", "tracejit.backends.region_choice", "tracejit.export.view_writes", "tracejit.export.strided_slices", "tracejit.auto_exactness", "tracejit.serialize.code_cache", "tracejit.serialize.cached_methods",
           "tracejit.lazy_module", "tracejit.trace.global_reads", "tracejit.support.global_guards",
           "tracejit.support.object_checks", "tracejit.support.const_args", "tracejit.backends.pinned_shapes", "tracejit.trace.forward_reads",
           "tracejit.backends.state_guards", "tracejit.backends.typed_inputs", "tracejit.backends.cuda_pass_choice",
           "tracejit.passes.cuda_linear_kernels", "tracejit.passes.cuda_conv_kernels", "tracejit.passes.cuda_sibling_linears"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no docstring examples"
    assert result.failed == 0
