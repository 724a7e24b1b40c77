"""What training does per second: the loss, tokens and model FLOPs of its steps, over the window since the last
progress line and over the whole run, validation time left out."""

from __future__ import annotations

import time
from typing import Any

import torch


class Throughput:
    """Add each step (`add`); `window()` closes the window for a progress line, `pause()`/`resume()` leave
    validation out of it, `summary()` is the run's line. `world`: every rank trains alike, so rates count all
    of them; `peak`: (FLOP/s, name) of this device, where known (runtime/flops.py), for MFU."""

    def __init__(self, world: int = 1, peak: tuple[float, str] | None = None) -> None:
        self.world, self.peak = world, peak
        self.loss: torch.Tensor | float = 0.0
        self.tokens = self.flops = 0.0
        self.run_tokens = self.run_flops = self.run_seconds = 0.0
        self._start = time.perf_counter()

    def add(self, loss: torch.Tensor | float, tokens: float, flops: float) -> None:
        """One step: its summed loss (a device tensor, read only when a window closes), this rank's tokens and
        model FLOPs."""
        self.loss = self.loss + loss
        self.tokens += tokens
        self.flops += flops

    def window(self) -> dict[str, Any]:
        """The window since the last one as a metrics record (train_loss, tokens_per_s, flops_per_s, mfu where the
        peak is known), counted into the run's totals; a new window starts."""
        seconds = time.perf_counter() - self._start
        loss = float(self.loss)  # the one host synchronisation of the loss, per window
        record = {
            "train_loss": loss / max(self.tokens, 1.0),
            "tokens_per_s": self.tokens * self.world / seconds,
            "flops_per_s": self.flops * self.world / seconds,
        }
        if self.peak is not None:
            record["mfu"] = self.flops / seconds / self.peak[0]  # one rank's share of its device
        self.run_tokens += self.tokens
        self.run_flops += self.flops
        self.run_seconds += seconds
        self.loss, self.tokens, self.flops = 0.0, 0.0, 0.0
        self.resume()
        return record

    def resume(self) -> None:
        """The window's clock starts now (after a validation: tokens/s counts training steps only)."""
        self._start = time.perf_counter()

    def summary(self) -> str | None:
        """The run's speed in one line: tokens/s, model FLOP/s, FLOP per token and MFU; None before any window."""
        if self.run_seconds <= 0:
            return None
        speed = self.run_flops / self.run_seconds
        against = (
            f"{speed / self.peak[0]:.1%} of {self.peak[1]} ({self.peak[0] / 1e12:,.2f} TFLOP/s)"
            if self.peak is not None
            else "peak of this device unknown (vaswani/runtime/flops.py: GPU_PEAKS)"
        )
        return (
            f"speed: {self.run_tokens * self.world / self.run_seconds:,.0f} tokens/s, "
            f"{speed * self.world / 1e12:,.3f} model TFLOP/s ({self.run_flops / max(self.run_tokens, 1) / 1e6:,.1f} "
            f"MFLOP per token, vaswani/runtime/flops.py); MFU {against}"
        )
