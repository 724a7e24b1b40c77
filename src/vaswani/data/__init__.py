"""Text in, batches out: reading and validating text, SentencePiece, preparing parallel, plain and labelled
text into memory-mapped arrays (one entry point: data/prepare.py), token-budget batching."""
