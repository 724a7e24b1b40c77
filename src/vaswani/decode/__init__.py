"""Decoding: search on the KV cache."""
