"""Text in, batches out: corpus reading and validation, SentencePiece, token-budget batching."""
