# vaswani serve in a container: the HTTP API, the web page, /health and /metrics for a model directory
# mounted at /model when the container runs (the image holds no model).
#
#   docker build -t vaswani .
#   docker run --rm -p 8000:8000 -v "$PWD/runs/multi30k_de_en:/model:ro" -e VASWANI_API_KEY=change-me vaswani
#   curl -H 'Authorization: Bearer change-me' -H 'Content-Type: application/json' \
#        -d '{"text": ["Ein Mann fährt Fahrrad."]}' http://127.0.0.1:8000/v1/translate
#
# Options after the image name go to `vaswani serve` (e.g. `vaswani --max-texts 128 --precision fp32`).
# CPU by default: PyTorch's CPU wheels (no CUDA libraries, ~1 GB smaller). For a GPU image, build with
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t vaswani:gpu .
# and run it with `docker run --gpus all ...` (NVIDIA Container Toolkit on the host); `--device auto` in
# `vaswani serve` then picks the GPU.
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first, from its own index, so that the project's requirement (torch>=2.5) is met by it and pip does
# not fetch the CUDA build from PyPI.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}"

WORKDIR /opt/vaswani
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install ".[serve]" && useradd --create-home --uid 10001 vaswani

USER vaswani
EXPOSE 8000
# Healthy while the translation worker runs (GET /health answers 200; 503 once it has stopped).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4).status != 200)"]
# 0.0.0.0 inside the container, so that the published port reaches it; set VASWANI_API_KEY (and
# VASWANI_METRICS_TOKEN for a Prometheus scraper) when the port is reachable by others.
ENTRYPOINT ["vaswani", "serve", "/model", "--host", "0.0.0.0", "--port", "8000"]
