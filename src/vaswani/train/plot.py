"""Training and validation curves as a PNG beside metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path


def plot_metrics(metrics: Path, output: Path) -> None:
    """Loss (train and dev) and dev BLEU against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    train = [(r["step"], r["train_loss"]) for r in records if "train_loss" in r]
    valid = [(r["step"], r["valid_loss"]) for r in records if "valid_loss" in r]
    scores = [(r["step"], r["valid_bleu"]) for r in records if "valid_bleu" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for points, label in ((train, "train (label-smoothed)"), (valid, "dev")):
        if points:
            left.plot(*zip(*points, strict=True), label=label, marker="." if label == "dev" else None)
    left.set(xlabel="step", ylabel="loss per target token", title="loss")
    left.legend()
    if scores:
        right.plot(*zip(*scores, strict=True), marker="o", color="tab:green")
    right.set(xlabel="step", ylabel="BLEU", title="dev BLEU (greedy)")
    for axis in (left, right):
        axis.grid(alpha=0.3)
    fig.tight_layout()
    tmp = output.with_name(f".{output.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(output)
