"""How many rows of logits the training loss computes at a time on each kind of device (train/loss.py; measured
for a precision by runtime/precision.py)."""

from __future__ import annotations

# The training loss projects onto the vocabulary this many rows at a time (train/loss.py). On a CPU 256 rows
# x 8,000 float32 logits (8 MB) stay in cache between the passes over them. A GPU wants
# large products and few launches: up to 2^26 logits (256 MB float32) a chunk, 8,388 rows at 8,000 subwords.
CPU_LOSS_CHUNK = 256
GPU_LOSS_LOGITS = 1 << 26


def loss_chunk_rows(device_type: str, vocab_size: int) -> int:
    """Rows of logits the training loss computes at a time on this kind of device."""
    if device_type == "cpu":
        return CPU_LOSS_CHUNK
    return max(CPU_LOSS_CHUNK, GPU_LOSS_LOGITS // max(1, vocab_size))
