"""The model, and nothing else: never imports data, training, decoding or the CLI."""

from vaswani.nn.attention import MultiHeadAttention, fused_attention, reference_attention
from vaswani.nn.build import build_model
from vaswani.nn.cache import KVCache
from vaswani.nn.language_model import CausalLM, MaskedLM
from vaswani.nn.transformer import AttentionWeights, Decoder, Encoder, Transformer

__all__ = [
    "AttentionWeights",
    "CausalLM",
    "Decoder",
    "Encoder",
    "KVCache",
    "MaskedLM",
    "MultiHeadAttention",
    "Transformer",
    "build_model",
    "fused_attention",
    "reference_attention",
]
