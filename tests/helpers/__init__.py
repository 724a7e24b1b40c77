"""What the tests share: small models, corpora, reference implementations, saved checkpoints, a server."""
