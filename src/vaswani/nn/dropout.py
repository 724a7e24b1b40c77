"""Residual and embedding dropout (§5.4, P_drop = 0.1 base / 0.3 big)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Module):
    """Inverted dropout, as `nn.Dropout`: in training each element is zeroed with probability `p`
    and the rest scaled by 1 / (1 - p); in eval mode the identity.

    On the CPU the mask is drawn 16 bits per element, four elements per 64-bit draw of torch's
    generator, instead of `nn.Dropout`'s `bernoulli_` (one draw per element): several times faster there,
    where `bernoulli_` was a large share of a bf16 training step of the Multi30k model. The drop
    probability is thus p rounded to a multiple of 1/65536; the generator is torch's default, so
    seeded runs repeat and resume exactly. On other devices, and under torch.compile, torch's own dropout is used.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or torch.compiler.is_compiling():
            # torch.compile draws its own masks in generated code; our in-place draw would break its graph
            return F.dropout(x, self.p, training=True)
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
        keep = bits.view(torch.int16)[:n].view(x.shape) >= round(self.p * 65536) - 32768  # P = 1 - p
        return x * keep * (1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"
