"""int8 decoding on the CPU (`--precision int8`): every linear layer, the output projection included, with int8
weights and one scale per output row, made once when the model is loaded.

The products run through fbgemm's dynamically quantized linear kernel, which torch maintains for x86 CPUs
(`torch.ops.quantized.linear_dynamic`): the activations are quantized per call (per tensor, 7 bits, as fbgemm needs
on CPUs without VNNI), multiplied with the int8 weights into int32, and scaled back to float32. Side by side with
the other kernels torch has for int8 on a CPU (benchmarks/int8_kernels.py, docs/benchmarks.md "int8 on the CPU"),
it is the one faster than float32: at a decoding step's sizes a 58k-word output projection reads a quarter of the
bytes. Layer norms, softmax, attention over the cache and the embeddings stay float32.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from vaswani.nn.packed import Parts, covers, replace_linears

KERNEL = "fbgemm's dynamic int8 linear (per-channel weights)"


def int8_available() -> str | None:
    """None where this torch can run int8 linear layers on this CPU, else why not (one line)."""
    engines = _engines()
    if not {"fbgemm", "x86"} & set(engines):
        return f"this CPU or torch build has no x86 int8 kernels (quantized engines: {', '.join(engines)})"
    return None


def _engines() -> list[str]:
    return list(torch.backends.quantized.supported_engines)


class Int8Linear(nn.Module):
    """y = x W^T + b, W stored as int8 with one float scale per output row (symmetric); `parts` are row ranges
    (start, stop) also packed on their own, for a projection used in parts (attention's W^Q and W^K W^V); parts
    that cover every row are all it keeps (the whole is their outputs side by side).

    Shape: (..., in_features) -> (..., out_features)
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, parts: Parts = ()) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self._parts = {(a, b): Int8Linear(weight[a:b], None if bias is None else bias[a:b]) for a, b in parts}
        self._packed = None if covers(parts, self.out_features) else _pack(weight, bias)

    @classmethod
    def of(cls, linear: nn.Linear, parts: Parts = ()) -> Int8Linear:
        return cls(linear.weight, linear.bias, parts)

    def part(self, start: int, stop: int) -> Int8Linear:
        """The rows start..stop-1 as a layer of their own (packed when this one was)."""
        return self._parts[(start, stop)]

    def forward(self, x: Tensor) -> Tensor:
        if self._packed is None:  # used in parts: the whole is theirs side by side
            return torch.cat([part(x) for part in self._parts.values()], dim=-1)
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, self.in_features).float(), self._packed, True)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def _pack(weight: Tensor, bias: Tensor | None):
    weight = weight.detach().float().cpu()
    scales = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()
    zero = torch.zeros(weight.size(0), dtype=torch.long)
    with warnings.catch_warnings():  # the quantized tensor type is deprecated; fbgemm's prepacking still takes it
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.quantize_per_channel(weight, scales, zero, axis=0, dtype=torch.qint8)
    return torch.ops.quantized.linear_prepack(quantized, None if bias is None else bias.detach().float().cpu())


def quantize_int8(model: nn.Module, whole_output: bool = True) -> nn.Module:
    """`model` with every nn.Linear replaced by an Int8Linear and its output projection (`logits`) by one too, in
    place (`whole_output`: see replace_linears); returns it. For decoding only: the int8 layers have no gradients
    and no state dict. A one-line ValueError where int8 cannot run (a GPU, a CPU without x86 int8 kernels)."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ValueError(f"--precision int8 runs on the CPU; on {device.type} use --precision bf16 or fp32")
    why = int8_available()
    if why is not None:
        raise ValueError(f"--precision int8 cannot run here: {why}; use --precision fp32")
    return replace_linears(model, Int8Linear, whole_output)
