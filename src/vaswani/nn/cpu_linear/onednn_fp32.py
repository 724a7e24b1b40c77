"""float32 linear layers for decoding on a CPU, through oneDNN with each weight reordered once into its blocked
layout (the layout torch.compile's CPU code uses): a decoding step's products run faster than torch's `addmm` on
an AVX2 CPU (docs/benchmarks.md, "CPU decoding"). The same float32 arithmetic as `F.linear`, summed in
another order. `replace_linears` is the one place a model's nn.Linear layers are swapped for such a layer
(nn/cpu_linear/int8.py does it too).

oneDNN makes a kernel for each number of rows it is given (kept in its cache), and a decoding step's rows change
as sentences end: a product's rows are padded to one of 8 counts per octave above 16 (`row_bucket`), so that a
process makes a few dozen kernels per layer where it made hundreds (docs/benchmarks.md, "Distillation").
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

Parts = tuple[tuple[int, int], ...]


def packed_available() -> bool:
    """Whether this torch has oneDNN's prepacked linear on the CPU."""
    ops = torch.ops.mkldnn
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(ops, "_linear_pointwise")
        and hasattr(ops, "_reorder_linear_weight")
    )


class PackedLinear(nn.Module):
    """y = x W^T + b with W reordered for oneDNN; `parts` as in Int8Linear. Decoding only: no gradients, and the
    weights are the ones at packing. Shape: (..., in_features) -> (..., out_features)"""

    def __init__(self, weight: Tensor, bias: Tensor | None, parts: Parts = (), rows: int = 64) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        weight = weight.detach().float().contiguous()
        self._parts = {(a, b): PackedLinear(weight[a:b], None if bias is None else bias[a:b]) for a, b in parts}
        whole = not covers(parts, self.out_features)
        self._weight = torch.ops.mkldnn._reorder_linear_weight(weight, rows) if whole else None
        self._bias = None if bias is None or self._weight is None else bias.detach().float().contiguous()

    def part(self, start: int, stop: int) -> PackedLinear:
        return self._parts[(start, stop)]

    def forward(self, x: Tensor) -> Tensor:
        if self._weight is None:  # used in parts: the whole is theirs side by side
            return torch.cat([part(x) for part in self._parts.values()], dim=-1)
        flat = x.reshape(-1, self.in_features)
        if torch.compiler.is_compiling():  # decode.compile: Inductor's own lowering takes frozen weights alone
            y = packed_linear(flat, self._weight, self._bias)
        else:
            rows = flat.size(0)
            y = torch.ops.mkldnn._linear_pointwise(padded(flat), self._weight, self._bias, "none", [], "")[:rows]
        return y.view(*x.shape[:-1], self.out_features)


def row_bucket(rows: int) -> int:
    """`rows` rounded up to one of 8 counts per octave above 16 (17-32 by 2, 33-64 by 4, ...): at most 1/8 more."""
    if rows <= 16:
        return rows
    step = 1 << ((rows - 1).bit_length() - 4)
    return -(-rows // step) * step


def padded(flat: Tensor) -> Tensor:
    """`flat`'s rows and rows of zeros up to `row_bucket` of its rows. Shape: (rows, in) -> (row_bucket(rows), in)"""
    rows = flat.size(0)
    more = row_bucket(rows) - rows
    return flat if more == 0 else torch.cat([flat, flat.new_zeros(more, flat.size(1))])


@torch.library.custom_op("vaswani::packed_linear", mutates_args=())
def packed_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's product with a reordered weight as one operation torch.compile calls as it is: Inductor lowers
    `mkldnn._linear_pointwise` only for weights it froze itself, and failed on ours. x: (rows, in_features)"""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@packed_linear.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]))


def covers(parts: Parts, rows: int) -> bool:
    """Whether `parts` are the rows 0..rows-1 in order, side by side: a layer used in parts then needs no copy of
    its whole weight (encoder-decoder attention's in_proj: 3 MB a layer at d_model 512)."""
    ends = [0]
    for a, b in parts:
        if a != ends[-1] or b <= a:
            return False
        ends.append(b)
    return len(ends) > 1 and ends[-1] == rows


def replace_linears(
    model: nn.Module,
    make: Callable[[Tensor, Tensor | None, Parts], nn.Module],
    whole_output: bool = True,
    output: Callable[[Tensor, Tensor | None, Parts], nn.Module] | None = None,
    output_too: bool = True,
) -> nn.Module:
    """Every nn.Linear of `model` replaced, in place, by `make(weight, bias, parts)` (where it returns None, left as
    it is), and its output projection
    (`logits`) by `output(output_weight, logit_bias, ())` (`make` by default; output_bias where the model has no
    logit_bias); `parts` are attention's W^Q and W^K W^V rows, which encoder-decoder attention uses apart (a
    layer's `cross_attn`, and a MultiHeadAttention on its own; self-attention never does, and its layers get no copy
    of them). `model.output_kind` becomes `output` (or `make`), the kind of layer a shortlist's rows are made into
    (OutputRows), so that they give the whole layer's logits; without `whole_output` (decoding with a shortlist)
    the whole output projection is not made: its copy of the output matrix (119 MB at 58k words and d_model 512 in
    float32) would never run. Without `output_too` the output projection is left as it is (torch's product on the
    model's own matrix, for a shortlist's rows too). Returns `model`."""
    from vaswani.nn.attention import MultiHeadAttention

    self_attention = {id(m.self_attn) for m in model.modules() if isinstance(getattr(m, "self_attn", None), nn.Module)}
    with torch.no_grad():
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if not isinstance(child, nn.Linear):
                    continue
                d = child.in_features
                apart = (
                    isinstance(module, MultiHeadAttention) and name == "in_proj" and id(module) not in self_attention
                )
                parts = ((0, d), (d, 3 * d)) if apart else ()
                made = make(child.weight, child.bias, parts)
                if made is not None:  # None: the layer stays torch's (float32_layer)
                    setattr(module, name, made)
        if output_too and hasattr(model, "output_weight"):
            bias = getattr(model, "logit_bias", model.output_bias)
            model.output_kind = output or make
            model.output_projection = (output or make)(model.output_weight, bias, ()) if whole_output else None
    return model


TIMED_FROM = 1 << 18  # elements: a smaller output matrix (a test's model) stays torch's, its products too short to time
PACKED_SHARE = 0.85  # one kernel is chosen over the other where it takes at most this share of the other's time (a
# margin, so that a machine where both are alike keeps one choice from process to process)


def output_packed(weight: Tensor | None = None) -> bool:
    """Whether a float32 output projection of `weight`'s shape runs packed. With AVX-512, always; with AVX2 alone it
    depends on the CPU, not on its flags: on an AMD EPYC oneDNN's packed product was 1.6x torch's at 128 rows of a
    58,101 x 512 matrix, on an Intel Xeon played as AVX2 it was slower (docs/benchmarks.md, "CPU decoding"), so there
    it is timed, once per process and shape (`timed`), where the matrix has TIMED_FROM elements at least. A packed
    copy holds the matrix twice."""
    if torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return True
    if weight is None or weight.numel() < TIMED_FROM:
        return False
    packed, plain = timed(*weight.shape)
    return packed <= PACKED_SHARE * plain


def float32_layer(weight: Tensor, bias: Tensor | None, parts: Parts = ()) -> PackedLinear | None:
    """A hidden layer's float32 product (`replace_linears`' `make`): packed, unless torch's own takes at most
    PACKED_SHARE of its time on this CPU (`timed`, once per process and shape), where None keeps the layer torch's.
    oneDNN's call has a fixed cost that a small layer's product does not repay, and how small depends on the CPU
    (docs/benchmarks.md, "CPU decoding")."""
    packed, plain = timed(*weight.shape)
    return None if plain <= PACKED_SHARE * packed else PackedLinear(weight, bias, parts)


@functools.cache
def timed(out_features: int, in_features: int) -> tuple[float, float]:
    """Seconds of oneDNN's packed product and of torch's `F.linear` on this CPU, for a random matrix of the shape's
    width (16,384 of its rows at most: the time per row is alike) at 32 and 128 rows (greedy and beam 4 batches),
    the best of three runs each after a warm-up. Once per process and shape."""
    rows = min(out_features, 16_384)
    weight = torch.randn(rows, in_features) * in_features**-0.5
    packed = PackedLinear(weight, None)
    inputs = [torch.randn(n, in_features) for n in (32, 128)]

    def seconds(product: Callable[[Tensor], Tensor]) -> float:
        total = 0.0
        for x in inputs:
            product(x)
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                product(x)
                runs.append(time.perf_counter() - start)
            total += min(runs)
        return total

    with torch.inference_mode():
        return seconds(packed), seconds(lambda x: torch.nn.functional.linear(x, weight))


def pack_fp32(model: nn.Module, whole_output: bool = True, every_layer: bool = False) -> nn.Module:
    """`model`'s linear layers as PackedLinear, in place, where it is on a CPU and this torch has them: each hidden
    layer where that is not slower on this CPU (`float32_layer`; `every_layer`: all of them), the output projection
    where `output_packed`; else `model` as it is. `whole_output`: see replace_linears."""
    if next(model.parameters()).device.type != "cpu" or not packed_available():
        return model
    output = getattr(model, "output_weight", None)
    make = PackedLinear if every_layer else float32_layer
    return replace_linears(model, make, whole_output, output=PackedLinear, output_too=output_packed(output))
