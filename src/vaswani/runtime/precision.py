"""Which precision runs this model faster on this device: bf16 autocast or float32, measured, not guessed.

CPU flags do not tell: a matrix product in bf16 runs much faster than in fp32 on an AMD EPYC with avx512_bf16,
*slower* on an Intel Xeon with avx512_bf16 and avx512_fp16, and emulated, far slower, on an AVX2-only CPU
(docs/benchmarks.md, "Training speed", and the page's opening). So `precision: auto` times the
model's own matrix products (its linear layers and the pre-softmax projection, at its dimensions and
at the number of rows a batch gives them, forward and for training backward too, weights cast by
autocast as in a real step) in both precisions, and picks bf16 only where they run clearly faster.

    choice = choose("auto", model_config, torch.device("cpu"), rows=4000, training=True)
    choice.precision      # "bf16" or "fp32"
    choice.describe()     # the choice and both measured figures, for the log

On a CUDA GPU the same products are timed (each synchronised with the device): a GPU with bf16 support takes
bf16 where it measures faster than float32 as torch runs it (TF32 where torch.backends.cuda.matmul allows it);
one without bf16 runs float32.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from vaswani.config import DECODING_PRECISIONS, PRECISIONS, ModelConfig
from vaswani.runtime.loss_chunks import loss_chunk_rows

# bf16 is chosen only where its matrix products are at least this much faster than float32: the rest
# of a step (casts, layer norms, softmax, attention, Adam) gains less than the products or nothing,
# so whole training steps gain far less than the products alone (docs/benchmarks.md, "Training speed").
BF16_MIN_SPEEDUP = 1.2
# Decoding is not measured: "auto" decodes in fp32 (see `choose`).
# (a measurement would depend on the machine's load, and bf16 changes some outputs)
DECODING_AUTO = "decoding runs fp32 unless --precision bf16, so the same command gives the same translation"
# Rows per product: enough to be the kernels a batch runs, few enough to keep the measurement short.
MAX_ROWS = 512
# A first product this many times slower in bf16 than in fp32 means bf16 is emulated (AVX2 alone: far slower still):
# the measurement stops there instead of running the slow path for seconds.
EMULATED = 8.0


@dataclass(frozen=True)
class Measurement:
    """Seconds for one pass over the model's matrix products, in each precision."""

    fp32_s: float
    bf16_s: float
    rows: int
    emulated: bool = False  # stopped after the probe: bf16 runs at a small fraction of fp32's speed

    @property
    def bf16_speedup(self) -> float:
        return self.fp32_s / self.bf16_s

    def figures(self) -> str:
        at_least, at_most = ("at least ", "at most ") if self.emulated else ("", "")
        return (
            f"fp32 {self.fp32_s * 1e3:.1f} ms, bf16 {at_least}{self.bf16_s * 1e3:.1f} ms per pass over the "
            f"model's matrix products at {self.rows} rows: bf16 {at_most}{self.bf16_speedup:.2f}x fp32's speed"
        )


@dataclass(frozen=True)
class Choice:
    """The precision to run in, what was asked for, and the measurement behind it (None: not measured)."""

    precision: str
    requested: str
    measurement: Measurement | None = None
    reason: str = ""

    def describe(self) -> str:
        """One line for the log: the choice and why."""
        figures = f" ({self.measurement.figures()})" if self.measurement else ""
        if self.requested == "auto":
            return f"precision auto -> {self.precision}: {self.reason}{figures}"
        reason = f": {self.reason}" if self.reason else ""
        return f"precision {self.precision}{reason}{figures}"

    def warning(self) -> str | None:
        """One warning line where an explicit bf16 measured slower than fp32; None otherwise."""
        m = self.measurement
        if self.requested != "bf16" or m is None or m.bf16_speedup >= 1.0:
            return None
        return (
            f"bf16 runs at {m.bf16_speedup:.2f}x fp32's speed on this device at this model's shapes "
            f"({m.figures()}); going on in bf16 as asked (precision auto would use fp32)"
        )


def check(precision: str, name: str = "precision", decoding: bool = False) -> None:
    """A one-line ValueError unless `precision` is one training (or with `decoding`, decoding) runs in."""
    allowed = DECODING_PRECISIONS if decoding else PRECISIONS
    if precision not in allowed:
        int8 = "; int8 is for decoding (translate, evaluate, serve, generate, classify)" if precision == "int8" else ""
        raise ValueError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {precision!r}{int8}")


def choose(
    requested: str,
    config: ModelConfig,
    device: torch.device,
    rows: int,
    training: bool,
    measure: Callable[..., Measurement] | None = None,
) -> Choice:
    """Resolve `requested` ("auto", "fp32", "bf16") for `config` on `device`.

    `rows`: positions per batch that go through each linear layer (training: the batch's tokens;
    decoding: sentences x beam). For training, "auto" and an explicit "bf16" are measured on CPUs and CUDA GPUs
    (an explicit bf16 to warn when it is slower); a GPU without bf16 runs fp32 under "auto". For decoding, "auto"
    is fp32, never measured (DECODING_AUTO): the same command gives the same output on any machine, under any load.
    """
    check(requested, decoding=not training)
    if requested == "fp32":
        return Choice("fp32", requested)
    if requested == "int8":
        from vaswani.nn.cpu_linear.int8 import kernels

        return Choice("int8", requested, reason=f"int8 linear layers, {kernels()}")
    if requested == "auto" and not training:
        return Choice("fp32", requested, reason=DECODING_AUTO)
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        if requested == "auto":
            return Choice("fp32", requested, reason="this GPU has no bf16 support")
        return Choice("bf16", requested)
    if device.type not in ("cpu", "cuda"):
        return Choice("fp32" if requested == "auto" else "bf16", requested, reason=f"{device.type} is not measured")
    measurement = (measure or measure_matmuls)(config, device, rows, training)
    if requested == "bf16":
        return Choice("bf16", requested, measurement)
    needed = BF16_MIN_SPEEDUP
    if measurement.bf16_speedup >= needed:
        return Choice("bf16", requested, measurement, f"bf16 autocast measured {measurement.bf16_speedup:.2f}x faster")
    why = "bf16 emulated on this CPU" if measurement.emulated else f"bf16 not at least {needed}x faster"
    return Choice("fp32", requested, measurement, why)


def _shapes(
    config: ModelConfig, training: bool, rows: int, device_type: str = "cpu"
) -> list[tuple[int, int, float, int]]:
    """(in, out, count, rows) of each distinct linear map one batch runs through, counted per layer."""
    d, f, v = config.d_model, config.d_ff, config.tgt_vocab_size
    decoder = [(d, 3 * d, 1), (d, d, 2), (d, 2 * d, 1), (d, d, 1), (d, f, 1), (f, d, 1)]  # self, cross, ff
    counts: dict[tuple[int, int], int] = {}
    layers = [(decoder, config.decoder_layers)]
    if training:  # decoding runs the encoder once per sentence, the decoder at every step
        layers.append(([(d, 3 * d, 1), (d, d, 1), (d, f, 1), (f, d, 1)], config.n_layers))
    for shapes, n in layers:
        for i, o, c in shapes:
            counts[(i, o)] = counts.get((i, o), 0) + c * n
    shapes = [(i, o, float(c), rows) for (i, o), c in counts.items()]
    chunk = loss_chunk_rows(device_type, v)
    if training and rows > chunk:  # the pre-softmax projection, chunk by chunk as the loss runs it
        return [*shapes, (d, v, rows / chunk, chunk)]
    return [*shapes, (d, v, 1.0, rows)]


def measure_matmuls(
    config: ModelConfig, device: torch.device, rows: int, training: bool, repeats: int = 3
) -> Measurement:
    """Time one pass over the model's linear maps in fp32 and under bf16 autocast (min of `repeats`,
    the two precisions alternating), on random data that leaves the global random state untouched."""
    rows = max(1, min(rows, MAX_ROWS * (8 if device.type == "cuda" else 1)))  # a GPU's kernels need more rows
    generator = torch.Generator(device).manual_seed(0)
    shapes = _shapes(config, training, rows, device.type)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def tensors(i: int, o: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(rows, i, generator=generator, device=device, requires_grad=training)
        w = torch.randn(o, i, generator=generator, device=device, requires_grad=training)
        return x, w

    data = [(*tensors(i, o, r), c) for i, o, c, r in shapes]

    def one_pass(bf16: bool, limit_s: float = float("inf")) -> float:
        total = 0.0
        cast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        for x, w, count in data:
            sync()
            start = time.perf_counter()
            with cast, contextlib.nullcontext() if training else torch.no_grad():
                y = F.linear(x, w)
                if training:
                    y.backward(torch.ones_like(y))
            sync()
            total += (time.perf_counter() - start) * count
            if total > limit_s:
                return float("inf")
        return total

    probe = _probe(device, generator) if device.type == "cpu" else None  # GPUs do not emulate bf16
    if probe is not None:
        return Measurement(probe[0], probe[1], 64, emulated=True)
    first = one_pass(False)  # first calls create the kernels (oneDNN primitives)
    one_pass(True)
    fp32 = bf16 = float("inf")
    for _ in range(repeats if first < 0.05 else 1):  # large products time steadily: once is enough
        fp32 = min(fp32, one_pass(False))
        bf16 = min(bf16, one_pass(True, limit_s=EMULATED * fp32))
    if bf16 == float("inf"):  # every bf16 pass ran past EMULATED x fp32
        return Measurement(fp32, EMULATED * fp32, rows, emulated=True)
    return Measurement(fp32, bf16, rows)


def bf16_emulated(device: torch.device | None = None) -> str | None:
    """Why bf16 should not be run here (the probe found it EMULATED-fold slower than fp32), or None.
    Benchmarks skip their bf16 contenders with this reason instead of running them for hours."""
    device = device or torch.device("cpu")
    probe = _probe(device, torch.Generator(device).manual_seed(0))
    if probe is None:
        return None
    return (
        f"bf16 is emulated on this CPU: a 64x256x256 product takes {probe[1] * 1e3:.2f} ms in bf16 against "
        f"{probe[0] * 1e3:.3f} ms in fp32 ({probe[1] / probe[0]:.0f}x slower)"
    )


def _probe(device: torch.device, generator: torch.Generator) -> tuple[float, float] | None:
    """A small product in both precisions: (fp32 s, bf16 s) when bf16 is EMULATED-fold slower, else None."""
    a = torch.randn(64, 256, generator=generator, device=device)
    b = torch.randn(256, 256, generator=generator, device=device)
    times = []
    for dtype in (torch.float32, torch.bfloat16):
        x, y = a.to(dtype), b.to(dtype)
        x @ y  # kernel creation
        best = float("inf")
        for _ in range(5):  # the fastest of five: one preempted run must not make bf16 look emulated
            start = time.perf_counter()
            x @ y
            best = min(best, time.perf_counter() - start)
        times.append(best)
    return (times[0], times[1]) if times[1] > EMULATED * times[0] else None
