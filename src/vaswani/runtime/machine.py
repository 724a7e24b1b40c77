"""What machine this is, to name next to every timing (docs/benchmarks.md names the CPU of each)."""

from __future__ import annotations


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), to name next to every timing."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
