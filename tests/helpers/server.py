"""A `vaswani serve` process for the tests that talk to one over HTTP (the API's and the web page's)."""

from pathlib import Path

from vaswani.serve.launch import Server, launch


def start_server(model_dir: Path, *args: str) -> Server:
    """`vaswani serve MODEL_DIR` on a free local port, CPU, fp32, with `args`; stop it with server.stop()."""
    return launch(model_dir, "--device", "cpu", "--precision", "fp32", *args)
