"""`vaswani serve`: the HTTP API, the micro-batcher and the web page (needs the [serve] extra)."""
