"""The Dockerfile: its build and run where a Docker engine answers; everywhere, its commands run here as written.

This machine has the docker client but no engine, like most CI runners: the image test is skipped there, saying
so, and the entrypoint and health check, which are what the image runs, are run directly instead.
"""

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from vaswani.serve.launch import free_port, launch

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]  # slow: containers

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _instruction(name: str) -> list[str]:
    """The exec-form (JSON) arguments of the Dockerfile's `name` instruction, continuation lines joined."""
    text = DOCKERFILE.replace("\\\n", " ")
    match = re.search(rf"^{name}\b.*?(\[.*\])\s*$", text, re.MULTILINE)
    assert match, f"no {name} [...] in the Dockerfile"
    return json.loads(match.group(1))


def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def test_the_entrypoint_serves_a_model_directory_and_the_health_check_tells_up_from_down(model_dir):
    entrypoint = _instruction("ENTRYPOINT")
    assert entrypoint[:3] == ["vaswani", "serve", "/model"] and "--host" in entrypoint
    port = free_port()
    # As the container runs it, on this machine's loopback (servers under test never listen beyond it).
    args = ["127.0.0.1" if a == "0.0.0.0" else str(port) if a == "8000" else a for a in entrypoint[3:]]
    check = [str(port).join(part.split("8000")) for part in _instruction("HEALTHCHECK")]
    assert check[0] == "python"
    with launch(model_dir, *args, port=port) as server:
        assert subprocess.run(check, capture_output=True, timeout=30).returncode == 0
        body = json.dumps({"text": ["Ein Mann. Eine Frau."]}).encode()
        request = urllib.request.Request(
            f"{server.url}/v1/translate", body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert len(json.load(response)["translations"][0]["sentences"]) == 2
    assert subprocess.run(check, capture_output=True, timeout=30).returncode != 0


def test_the_image_holds_what_it_copies():
    copied = [p for line in re.findall(r"^COPY (.+)$", DOCKERFILE, re.MULTILINE) for p in line.split()[:-1]]
    assert copied and all((ROOT / p).exists() for p in copied)
    kept = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert set(copied) <= kept


@pytest.mark.skipif(
    not _docker_engine(),
    reason="no Docker engine answers `docker info` here: the image is built "
    "where one runs; its entrypoint and health check are tested above",
)
def test_the_image_builds_and_serves_a_mounted_model(model_dir):
    tag = "vaswani-test:latest"
    base = re.search(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE).group(1)
    have = subprocess.run(["docker", "image", "inspect", base], capture_output=True).returncode == 0
    if not have and subprocess.run(["docker", "pull", base], capture_output=True, timeout=600).returncode != 0:
        pytest.skip(f"a Docker engine answers but cannot fetch the base image {base} (offline?)")
    subprocess.run(["docker", "build", "-t", tag, str(ROOT)], check=True, timeout=1800)
    port = free_port()
    run = subprocess.run(
        ["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:8000", "-v", f"{model_dir}:/model:ro", tag],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    container = run.stdout.strip()
    try:
        deadline, status = time.monotonic() + 300, ""
        while time.monotonic() < deadline and status != "healthy":
            time.sleep(2)
            status = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Health.Status}}", container], capture_output=True, text=True
            ).stdout.strip()
        assert status == "healthy", subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        body = json.dumps({"text": ["Ein Mann fährt Fahrrad."]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/translate", body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.load(response)["translations"][0]["text"]
    finally:
        subprocess.run(["docker", "stop", container], capture_output=True, timeout=60)
