"""Size arithmetic written as torchvision's detection transform writes it (tests/guards/test_detection_size_reads.py):
``float(size)`` and ``int(float of sizes)``, recorded in the modules of trace/float_reads.MODULES only."""
import math

import torch.nn.functional as F


def pad_to_stride(x):
    h = x.size(-1)
    padded = int(math.ceil(float(h) / 8.0) * 8.0)  # @pad_to_stride
    return F.pad(x, (0, padded - h)) * isinstance(2.5, float) * isinstance(padded, int)
