"""The BART family's encoder-decoders (transformers' Marian, M2M-100 and NLLB-200, mBART-50) under our names: one
mapping of their stacks, and a registry of layouts keyed by config.json's `model_type`, each a short declaration of
what differs from the family (as CTranslate2 registers one loader per architecture).

Every member stores a layer alike: `self_attn` (q, k, v, out projections), `self_attn_layer_norm`, in the decoder
`encoder_attn` and its norm, `fc1`/`fc2`, `final_layer_norm`. What differs is declared in `Layout`: Marian's residual
stream stored in another dimension order, a LayerNorm after each stack (pre-norm models), mBART's LayerNorm on the
embeddings and its learned positions, a bias on the output, whether embeddings are scaled by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vaswani.pretrained import WeightMap


@dataclass(frozen=True)
class Layout:
    """What one member of the family holds beyond the layers every member stores alike."""

    name: str  # as messages name the checkpoint's kind
    permuted: bool = False  # the residual stream's dimensions stored in Marian's order (marian.inverse_permutation)
    final_norms: bool = True  # a LayerNorm after each stack (`layer_norm`): pre-norm models
    embedding_norm: bool = False  # a LayerNorm on the embeddings (`layernorm_embedding`)
    learned_positions: bool = False  # a stored table (`embed_positions.weight`), else sinusoids computed
    output_bias: bool = False  # `final_logits_bias` added to the output's logits
    scale_embeddings: bool = False  # config.json's scale_embedding where it says none


LAYOUTS = {
    "marian": Layout("Marian", permuted=True, final_norms=False, output_bias=True),
    "m2m_100": Layout("m2m_100", scale_embeddings=True),  # NLLB-200 too
    "mbart": Layout("mbart", embedding_norm=True, learned_positions=True, output_bias=True),
}


def layout_of(model_type: str) -> Layout:
    return LAYOUTS[model_type]


def map_stacks(weights: WeightMap, n_layers: int, decoder_layers: int, d_ff: int, order: torch.Tensor | None = None):
    """Every layer of both stacks into `weights.out`; `order` (Marian's): the residual stream's dimensions as they
    are stored, put back in ours (a matrix's columns that read the stream, a matrix's rows and a vector that write
    it)."""
    D = weights.d_model

    def reads(name: str, rows: int) -> torch.Tensor:  # (rows, D): its columns read the stream
        matrix = weights.get(name, (rows, D))
        return matrix if order is None else matrix[:, order].contiguous()

    def writes(name: str, shape: tuple[int, ...]) -> torch.Tensor:  # (D, ...) or (D,): writes the stream
        tensor = weights.get(name, shape)
        return tensor if order is None else tensor[order].contiguous()

    out, get = weights.out, weights.get

    def attention(ours: str, theirs: str) -> None:
        out[f"{ours}.in_proj.weight"] = torch.cat([reads(f"{theirs}.{p}_proj.weight", D) for p in "qkv"])
        out[f"{ours}.in_proj.bias"] = torch.cat([get(f"{theirs}.{p}_proj.bias", (D,)) for p in "qkv"])
        out[f"{ours}.out_proj.weight"] = writes(f"{theirs}.out_proj.weight", (D, D))
        out[f"{ours}.out_proj.bias"] = writes(f"{theirs}.out_proj.bias", (D,))

    def norm(ours: str, theirs: str) -> None:
        out[f"{ours}.weight"] = writes(f"{theirs}.weight", (D,))
        out[f"{ours}.bias"] = writes(f"{theirs}.bias", (D,))

    for stack, n, cross in (("encoder", n_layers, False), ("decoder", decoder_layers, True)):
        for i in range(n):
            ours, theirs = f"{stack}.layers.{i}", f"model.{stack}.layers.{i}"
            attention(f"{ours}.self_attn", f"{theirs}.self_attn")
            norm(f"{ours}.norms.0", f"{theirs}.self_attn_layer_norm")
            if cross:
                attention(f"{ours}.cross_attn", f"{theirs}.encoder_attn")
                norm(f"{ours}.norms.1", f"{theirs}.encoder_attn_layer_norm")
            out[f"{ours}.feed_forward.linear1.weight"] = reads(f"{theirs}.fc1.weight", d_ff)
            out[f"{ours}.feed_forward.linear1.bias"] = get(f"{theirs}.fc1.bias", (d_ff,))
            out[f"{ours}.feed_forward.linear2.weight"] = writes(f"{theirs}.fc2.weight", (D, d_ff))
            out[f"{ours}.feed_forward.linear2.bias"] = writes(f"{theirs}.fc2.bias", (D,))
            norm(f"{ours}.norms.{2 if cross else 1}", f"{theirs}.final_layer_norm")
