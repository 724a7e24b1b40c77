"""The toy run the trainer's tests train (reversing short strings: seconds on a CPU), and how they run it."""

import subprocess
import sys

from vaswani.config import Config

TOY = {
    "model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "n_layers": 2, "dropout": 0.1},
    "data": {
        "toy_task": "reverse",
        "toy_train_size": 300,
        "toy_valid_size": 16,
        "toy_max_len": 6,
        "tokenizer": "char",
        "vocab_size": 16,
        "max_tokens": 120,
    },
    # fp32 by name: tests that compare two runs must not depend on a timing-based choice (precision auto)
    "train": {"max_steps": 6, "valid_every": 3, "warmup_steps": 10, "keep_last": 5, "precision": "fp32"},
}


def toy_config(**train) -> Config:
    """The toy run's config with these train settings."""
    values = {k: dict(v) for k, v in TOY.items()}
    values["train"].update(train)
    return Config.from_dict(values)


def quiet():
    """A console that prints nowhere."""
    from rich.console import Console

    return Console(file=open("/dev/null", "w"))


def run_cli(*args):
    """`vaswani ARGS` in a new process: its exit code, standard output and error."""
    return subprocess.run([sys.executable, "-m", "vaswani.cli", *args], capture_output=True, text=True, timeout=120)
