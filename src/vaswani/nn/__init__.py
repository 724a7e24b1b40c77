"""The model, and nothing else: never imports data, training, decoding or the CLI."""

from vaswani.nn.attention import MultiHeadAttention, fused_attention, reference_attention
from vaswani.nn.cache import KVCache
from vaswani.nn.transformer import AttentionWeights, Decoder, Encoder, Transformer

__all__ = [
    "AttentionWeights",
    "Decoder",
    "Encoder",
    "KVCache",
    "MultiHeadAttention",
    "Transformer",
    "fused_attention",
    "reference_attention",
]
