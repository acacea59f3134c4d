"""The error export raises."""
from __future__ import annotations


class ExportError(RuntimeError):
    """The traced program cannot be written as ONNX (an op without conversion, a guard, ...).

    ``op`` is the ATen op and ``source`` the user's source line that ran it, when known.
    """

    def __init__(self, message: str, op: str | None = None, source=None):
        where = f" (traced at {source})" if source is not None else ""
        super().__init__(f"{message}{where}")
        self.op = op
        self.source = source


# ONNX's random ops cannot draw torch's stream: a program that seeds it, or draws from a captured generator
RNG_REFUSAL = {
    True: "forward seeds torch's random number generator here (torch.manual_seed or a torch.Generator it makes and "
          "seeds): ONNX's random ops cannot draw torch's stream, so the exported model would not give eager's "
          "numbers; draw the noise outside the model and pass it in as an input, or keep the program in torch "
          "(tracejit.save, or optimize_for_inference with backend='torch', replays the seeds)",
    False: "this random op draws from a torch.Generator made outside forward (captured by the trace): ONNX's random "
           "ops cannot draw its stream, so the exported model would not give eager's numbers; draw the noise outside "
           "the model and pass it in as an input, or keep the program in torch"}
