"""Linear layers for decoding on a CPU: int8 (oneDNN where it sums in 32 bits, else fbgemm) and float32 prepacked
for oneDNN; which one an engine uses is decode/engine.py's choice."""
