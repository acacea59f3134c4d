"""Differential cases: patterns from GitHub issues about torch.jit.trace (each names its source)."""
import torch
import torch.nn.functional as F

from harness import Case, Inputs

_in = Inputs(2024)
R, _g = _in.R, _in.g


def _eos_mask_setitem(features, features_len):
    """pytorch/pytorch#43548: a mask from arange(size) written into a slice of the input."""
    eos_mask = torch.arange(features.shape[1]).eq(features_len).float()
    features[:, :, 2] = eos_mask.unsqueeze(0)
    return features


def _shape_arith(hidden_states):
    """pytorch/pytorch#56162: sizes taken from .shape and added to (eager: Python ints)."""
    batch_size, seq_length = hidden_states.shape[:2]
    real_seq_length = seq_length
    real_seq_length += 2
    return hidden_states.new_zeros(real_seq_length + seq_length) + batch_size


def _pad_if_needed(x):
    """BridgeDepth/ViT padding: `if pad > 0:` on sizes (torch warns "a Python boolean")."""
    pad = (4 - x.size(-1) % 4) % 4
    if pad > 0:
        x = F.pad(x, (0, pad))
    return x * 2


def _assert_shape(x):
    """detectron2 nms.py: `assert boxes.shape[-1] == 4` (a size comparison, "a Python boolean")."""
    assert x.shape[-1] == 4
    return x[:, 2:] - x[:, :2]


CASES = [
    Case("issue_43548_eos_mask_setitem", _eos_mask_setitem, (torch.tensor([[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]),
                                                            torch.tensor([1])),
         [(torch.tensor([[[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]), torch.tensor([2])),
          (torch.rand(1, 4, 3, generator=_g), torch.tensor([0]))], source="pytorch/pytorch#43548"),
    Case("issue_56162_shape_arithmetic", _shape_arith, (R(2, 3, 5),), [(R(4, 6, 5),), (R(1, 1, 2),)],
         source="pytorch/pytorch#56162", deliberate="torch-size-aliasing"),
    Case("pad_if_needed_branch", _pad_if_needed, (R(2, 6),), [(R(3, 6),), (R(1, 2),)],
         source="size branches in ViT/stereo padding (TracerWarning issues)"),
    Case("assert_on_shape", _assert_shape, (R(3, 4),), [(R(5, 4),), (R(1, 4),)], source="detectron2 nms assert"),
]


@torch.jit._script_if_tracing
def _scripted_helper(x: torch.Tensor) -> torch.Tensor:
    """torchvision's detection helpers: compiled by TorchScript when torch.jit traces them."""
    if torch.jit.is_tracing():
        return x.flatten(0) * 2
    return x.reshape(-1) * 2


def _calls_script_if_tracing(x):
    return _scripted_helper(x) + 1


def _zeros_copy(x):
    """pytorch/pytorch#4250: `out = zeros(x.size()); out.copy_(x)`, a common idiom."""
    out = torch.zeros(x.size())
    out.copy_(x)
    return out * 2


def _iadd_accumulator(x):
    """pytorch/pytorch#113945: `+=` into a tensor made from the input's shape."""
    idx = x.new_zeros(x.shape)
    idx += x
    return idx + 1


def _transpose_inplace_channels_last(x):
    """pytorch/pytorch#92558: in-place transpose_ then contiguous(channels_last); torch's check fails."""
    v1 = torch.Tensor.transpose_(x, 0, 1)
    v2 = torch.Tensor.contiguous(x, memory_format=torch.channels_last)
    return v1 * 1, v2 * 1


def _data_assignment(x):
    """pytorch/pytorch#48477: `y0.data = y1` inside forward."""
    y0 = x * 0
    y1 = x * 1
    y0.data = y1
    return y0


def _index_put_accumulate(x, update):
    """pytorch/pytorch#29008: `x[..., tensor([2, 1, 3]), 2:4] += update`."""
    x[..., torch.tensor([2, 1, 3]), 2:4] += update
    return x


def _fill_row_zero(x):
    """torch.jit docs ("Tracing of in-place operations of tensor views"): fill a row of the input."""
    x[0] = torch.zeros(x.shape[1])
    return x


CASES += [
    Case("issue_4250_zeros_copy", _zeros_copy, (R(3, 4),), [(R(5, 2),), (R(1, 6),)], source="pytorch/pytorch#4250"),
    Case("issue_113945_iadd", _iadd_accumulator, (R(3, 4),), [(R(5, 2),), (R(1, 6),)],
         source="pytorch/pytorch#113945"),
    Case("issue_92558_transpose_channels_last", _transpose_inplace_channels_last, (R(1, 2, 4, 4),),
         [(R(1, 3, 5, 5),), (R(1, 1, 2, 3),)], source="pytorch/pytorch#92558",
         deliberate="input-or-copy-kept-apart"),
    Case("issue_48477_data_assignment", _data_assignment, (R(3),), [(R(5),), (R(1),)], source="pytorch/pytorch#48477",
         deliberate="checker-mismatch-raises", refuses=torch.jit.TracingCheckError),
    Case("issue_29008_index_put_accumulate", _index_put_accumulate, (R(3, 4, 5, 6, 7), R(3, 1, 1, 3, 2)),
         [(R(2, 4, 5, 6, 7), R(2, 1, 1, 3, 2)), (R(1, 2, 4, 6, 5), R(1, 1, 1, 3, 2))], source="pytorch/pytorch#29008",
         deliberate="no-torch-tensor-warning"),
    Case("torchvision_script_if_tracing_helper", _calls_script_if_tracing, (R(3),), [(R(5),), (R(1),)],
         source="issue 9: torchvision detection models (torch.jit._script_if_tracing + is_tracing)"),
    Case("docs_fill_row_zero", _fill_row_zero, (R(3, 4),), [(R(5, 6),), (R(2, 2),)], source="torch.jit docs"),
]
