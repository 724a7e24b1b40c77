"""int8 decoding on the CPU (`--precision int8`): every linear layer, the output projection included, with int8
weights and one scale per output row, made once when the model is loaded; a layer of fewer than FLOAT32_BELOW
weights stays float32 (oneDNN's packed product, nn/cpu_linear/onednn_fp32.py), where quantizing its activations
costs more than its int8 product saves (a d_model 128 model's layers; docs/benchmarks.md, "Distillation").

The products run through fbgemm's dynamically quantized linear kernel, which torch maintains for x86 CPUs
(`torch.ops.quantized.linear_dynamic`): the activations are quantized per call (7 bits, as fbgemm needs on CPUs
without VNNI), multiplied with the int8 weights into int32, and scaled back to float32. The activations are
quantized per row, as CTranslate2 quantizes them, so that a sentence's output never depends on the sentences
batched with it: each row is divided by its largest magnitude, and one row more (+1 and -1, its product dropped)
fixes every call's range to [-1, 1], so fbgemm's one scale per call is the same for every row of every call; the
output is multiplied back by each row's magnitude (`FbgemmWeight`). Side by side with
the other kernels torch has for int8 on a CPU (benchmarks/int8_kernels.py, docs/benchmarks.md, "CPU decoding"),
it is the one faster than float32: at a decoding step's sizes a 58k-word output projection reads a quarter of the
bytes. Where oneDNN multiplies int8 with 32-bit sums (AMX tiles, as on Intel Xeons since Sapphire Rapids, or VNNI
instructions, as on AMD Zen 4 and Intel CPUs since Cascade Lake and Alder Lake), every layer runs through oneDNN's
quantized product instead (`OnednnWeight`, 8-bit activations per row): on AMX it runs the output projection
several times as fast as fbgemm's and the other layers faster too (docs/benchmarks.md, "CPU decoding"), and it is
faster than fbgemm with VNNI alone too. On a CPU with AVX2 alone
fbgemm's is faster and oneDNN's 8-bit sums would saturate. The choice follows the CPU (`output_kernel`,
`layer_kernel`), never a timing, so the same command gives the same output on a machine under any load.
Layer norms, softmax, attention over the cache and the embeddings stay float32.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import Tensor, nn

from vaswani.nn.cpu_linear.onednn_fp32 import (
    PackedLinear,
    Parts,
    covers,
    float32_layer,
    packed_available,
    padded,
    replace_linears,
)

KERNEL = "fbgemm's dynamic int8 linear (per-channel weights, 7-bit activations per row)"
OUTPUT_KERNEL: str | None = None  # the output projection's kernel, "fbgemm" or "onednn"; None: output_kernel() picks
LAYER_KERNEL: str | None = None  # the other layers' kernel; None: layer_kernel() picks
# Weights below which a layer stays float32: 512 x 512 is where int8 starts to pay at a decoding step's rows
# (python benchmarks/int8_kernels.py --small; docs/benchmarks.md, "Distillation")
FLOAT32_BELOW = 512 * 512


def int8_available() -> str | None:
    """None where this torch can run int8 linear layers on this CPU, else why not (one line)."""
    engines = _engines()
    if not {"fbgemm", "x86"} & set(engines):
        return f"this CPU or torch build has no x86 int8 kernels (quantized engines: {', '.join(engines)})"
    return None


def _engines() -> list[str]:
    return list(torch.backends.quantized.supported_engines)


def output_kernel() -> str:
    """The output projection's int8 kernel here: "onednn" where oneDNN may multiply int8 with 32-bit sums (AMX tiles
    or VNNI instructions: `_onednn_exact`), else "fbgemm"."""
    if OUTPUT_KERNEL is not None:
        return OUTPUT_KERNEL
    return _by_cpu()


def layer_kernel() -> str:
    """The other linear layers' int8 kernel (LAYER_KERNEL, else as output_kernel picks)."""
    if LAYER_KERNEL is not None:
        return LAYER_KERNEL
    return _by_cpu()


def _by_cpu() -> str:
    return "onednn" if _onednn_exact() and hasattr(torch.ops.onednn, "qlinear_pointwise") else "fbgemm"


def layer(weight: Tensor, bias: Tensor | None, parts: Parts = ()) -> Int8Linear | PackedLinear | None:
    """A linear layer (its parts too), through `layer_kernel()`'s kernel, or float32 where it is small (`small`):
    packed, or torch's own where that is faster here (`float32_layer`'s None)."""
    if small(weight):
        return float32_layer(weight, bias, parts)
    return Int8Linear(weight, bias, parts, kernel=layer_kernel())


def output_layer(weight: Tensor, bias: Tensor | None, parts: Parts = ()) -> Int8Linear:
    """A model's output projection (or a shortlist's rows of it), through `output_kernel()`'s kernel."""
    return Int8Linear(weight, bias, parts, kernel=output_kernel())


def small(weight: Tensor) -> bool:
    """Whether a layer of this weight stays float32: fewer than FLOAT32_BELOW weights, where oneDNN's packed
    float32 product runs on this torch."""
    return weight.numel() < FLOAT32_BELOW and packed_available()


def kernels() -> str:
    """The int8 kernels, in words (for the log)."""
    onednn = "oneDNN's quantized product (per-channel weights, 8-bit activations per row)"
    layers, output = layer_kernel(), output_kernel()
    if layers == output:
        words = onednn if layers == "onednn" else KERNEL
    elif output == "onednn":
        words = f"{KERNEL}; the output projection through {onednn}"
    else:
        words = f"{onednn}; the output projection through {KERNEL}"
    if FLOAT32_BELOW > 0 and packed_available():
        words += f"; layers under {FLOAT32_BELOW:,} weights float32"
    return words


def _onednn_exact() -> bool:
    """Whether oneDNN may multiply int8 with 32-bit sums in this process: on AMX tiles, or with VNNI instructions
    (AVX-512 VNNI, or AVX-VNNI on CPUs without AVX-512) that the CPU has and ONEDNN_MAX_CPU_ISA does not stop short
    of. Without them its 8-bit activations saturate 16-bit sums (fbgemm's 7 bits do not)."""
    if _amx():
        return True
    capabilities = torch.cpu.get_capabilities() if hasattr(torch.cpu, "get_capabilities") else {}
    avx512_vnni, avx_vnni = capabilities.get("avx512_vnni", False), capabilities.get("avx_vnni", False)
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if limit in ("ALL", "DEFAULT") or limit.startswith("AVX10"):
        return bool(avx512_vnni or avx_vnni)
    if limit.startswith("AVX512"):  # AVX512_CORE_VNNI and every level above it hold VNNI; AVX512_CORE does not
        return bool(avx512_vnni) and any(word in limit for word in ("VNNI", "BF16", "FP16", "AMX"))
    return limit.startswith("AVX2_VNNI") and bool(avx_vnni)


def _amx() -> bool:
    """Whether oneDNN may run AMX instructions in this process."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if limit not in ("ALL", "DEFAULT") and "AMX" not in limit and not limit.startswith("AVX10_2"):
        return False
    supported = getattr(torch.cpu, "_is_amx_tile_supported", None)
    allowed = getattr(torch._C._cpu, "_init_amx", None)  # asks the kernel for the tiles' state (Linux)
    return bool(supported and allowed and supported() and allowed())


class Int8Linear(nn.Module):
    """y = x W^T + b, W stored as int8 with one float scale per output row (symmetric); `parts` are row ranges
    (start, stop) also packed on their own, for a projection used in parts (attention's W^Q and W^K W^V); parts
    that cover every row are all it keeps (the whole is their outputs side by side).

    Shape: (..., in_features) -> (..., out_features)
    """

    def __init__(self, weight: Tensor, bias: Tensor | None, parts: Parts = (), kernel: str = "fbgemm") -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self._parts = {
            (a, b): Int8Linear(weight[a:b], None if bias is None else bias[a:b], kernel=kernel) for a, b in parts
        }
        pack = OnednnWeight if kernel == "onednn" else FbgemmWeight
        self._packed = None if covers(parts, self.out_features) else pack(weight, bias)

    @classmethod
    def of(cls, linear: nn.Linear, parts: Parts = ()) -> Int8Linear:
        return cls(linear.weight, linear.bias, parts)

    def part(self, start: int, stop: int) -> Int8Linear:
        """The rows start..stop-1 as a layer of their own (packed when this one was)."""
        return self._parts[(start, stop)]

    def forward(self, x: Tensor) -> Tensor:
        if self._packed is None:  # used in parts: the whole is theirs side by side
            return torch.cat([part(x) for part in self._parts.values()], dim=-1)
        flat = x.reshape(-1, self.in_features).float()
        if flat.size(0) == 0:  # no rows: no kernel called (fbgemm's and oneDNN's want some)
            return x.new_zeros(*x.shape[:-1], self.out_features, dtype=torch.float32)
        return self._packed(flat).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def row_magnitudes(x: Tensor) -> Tensor:
    """Each row's largest magnitude (a tiny number for a row of zeros), what its int8 activations are scaled by.
    Shape: (rows, in) -> (rows, 1)"""
    return x.abs().amax(dim=1, keepdim=True).clamp_(min=1e-30)


def row_scaled(y: Tensor, magnitudes: Tensor, bias: Tensor | None) -> Tensor:
    """The product of the rows divided by their magnitudes, scaled back, plus the bias, in place.
    Shape: (rows, out), (rows, 1), (out,) -> (rows, out)"""
    return y.mul_(magnitudes) if bias is None else torch.addcmul(bias, y, magnitudes, out=y)


class FbgemmWeight:
    """int8 weights for fbgemm's dynamically quantized product (per-channel symmetric int8), whose activations it
    quantizes with one scale per call, over the call's range of values. Each call's rows, divided by their largest
    magnitude, are multiplied with one row more, +1 and -1 then zeros (`pins`), whose product is dropped: every
    call's range is then [-1, 1] and its scale the same whatever the batch, which is quantizing each row on its
    own. Shape: (rows, in_features) -> (rows, out_features)"""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        weight = weight.detach().float().cpu()
        scales = row_scales(weight).double()
        zero = torch.zeros(weight.size(0), dtype=torch.long)
        with warnings.catch_warnings():  # the quantized tensor type is deprecated; fbgemm's prepacking still takes it
            warnings.simplefilter("ignore", UserWarning)
            quantized = torch.quantize_per_channel(weight, scales, zero, axis=0, dtype=torch.qint8)
        self.weight = torch.ops.quantized.linear_prepack(quantized, None)
        self.bias = None if bias is None else bias.detach().float().cpu().contiguous()
        self.pins = torch.zeros(1, weight.size(1))
        self.pins[0, :2] = torch.tensor([1.0, -1.0])

    def __call__(self, x: Tensor) -> Tensor:
        rows, magnitudes = x.size(0), row_magnitudes(x)
        pinned = x.new_empty(rows + 1, x.size(1))
        torch.div(x, magnitudes, out=pinned[:rows])
        pinned[rows:] = self.pins
        y = torch.ops.quantized.linear_dynamic(pinned, self.weight, True)  # 7 bits: no 16-bit overflow without VNNI
        return row_scaled(y[:rows], magnitudes, self.bias)


class OnednnWeight:
    """int8 weights for oneDNN's quantized product (torch.ops.onednn: torch's x86 int8 path, the one its compiled
    code uses), which runs on AMX tiles or with VNNI where the CPU has them: per-channel symmetric int8 weights as
    fbgemm's, the activations quantized per row to uint8 around 128 (each row divided by its largest magnitude: one
    scale, 1/127, for every row of every call). Shape: (rows, in_features) -> (rows, out_features)"""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        weight = weight.detach().float().cpu()
        self.scales = row_scales(weight)
        quantized = torch.round(weight / self.scales[:, None]).clamp(-127, 127).to(torch.int8)
        self.weight = torch.ops.onednn.qlinear_prepack(quantized, None)
        self.zeros = torch.zeros(weight.size(0), dtype=torch.long)
        self.bias = None if bias is None else bias.detach().float().cpu().contiguous()

    def __call__(self, x: Tensor) -> Tensor:
        if torch.compiler.is_compiling():  # compiled: one opaque call
            return onednn_int8_linear(x, self.weight, self.scales, self.zeros, self.bias)
        # a few row counts (onednn_fp32.row_bucket): oneDNN makes a kernel for each
        return _onednn_int8_linear(padded(x), self.weight, self.scales, self.zeros, self.bias)[: x.size(0)]


def _onednn_int8_linear(x: Tensor, weight: Tensor, scales: Tensor, zeros: Tensor, bias: Tensor | None) -> Tensor:
    magnitudes = row_magnitudes(x)
    quantized = torch.round(x * (127.0 / magnitudes)).add_(128).to(torch.uint8)  # 1..255
    y = torch.ops.onednn.qlinear_pointwise(
        quantized, 1.0 / 127.0, 128, weight, scales, zeros, None, 1.0, 0, torch.float32, "none", [], ""
    )  # fmt: skip
    return row_scaled(y, magnitudes, bias)


@torch.library.custom_op("vaswani::onednn_int8_linear", mutates_args=())
def onednn_int8_linear(x: Tensor, weight: Tensor, scales: Tensor, zeros: Tensor, bias: Tensor | None) -> Tensor:
    """OnednnWeight's product as one operation that torch.compile calls as it is (its activation scale is read on
    the host, which would split the compiled step)."""
    return _onednn_int8_linear(x, weight, scales, zeros, bias)


@onednn_int8_linear.register_fake
def _(x: Tensor, weight: Tensor, scales: Tensor, zeros: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty((x.shape[0], zeros.shape[0]))


def row_scales(weight: Tensor) -> Tensor:
    """Each output row's symmetric int8 scale (its largest magnitude is 127), for either kernel. (out, in) -> (out,)"""
    return (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-12)


def quantize_int8(model: nn.Module, whole_output: bool = True) -> nn.Module:
    """`model` with every nn.Linear replaced by an Int8Linear (float32 where it is `small`) and its output projection
    (`logits`) by one too, in place (`whole_output`: see replace_linears); returns it. The output projection's kind
    follows the whole matrix, so that a shortlist's rows of it (as many as a batch's words) are of that one kind
    whatever the batch. For decoding only: the int8 layers have no gradients
    and no state dict. A one-line ValueError where int8 cannot run (a GPU, a CPU without x86 int8 kernels)."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ValueError(f"--precision int8 runs on the CPU; on {device.type} use --precision bf16 or fp32")
    why = int8_available()
    if why is not None:
        raise ValueError(f"--precision int8 cannot run here: {why}; use --precision fp32")
    weight = getattr(model, "output_weight", None)
    output = PackedLinear if weight is not None and small(weight) else output_layer
    return replace_linears(model, layer, whole_output, output=output)
