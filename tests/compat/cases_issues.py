"""Differential cases: patterns from GitHub issues about torch.jit.trace (each names its source)."""
import torch
import torch.nn.functional as F

from harness import Case

_g = torch.Generator().manual_seed(2024)


def R(*shape):
    return torch.randn(*shape, generator=_g)


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
