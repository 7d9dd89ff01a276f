"""What the benchmarks share: a ticker process and reading its Prometheus metrics."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kairos.streams.settings import KafkaSettings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def metric(port: int, name: str) -> dict[str, float]:
    """Samples of one metric from a ticker's /metrics page, keyed by their label text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, value = line.rsplit(" ", 1)
            samples[key[len(name) :]] = float(value)
    return samples


def start_ticker(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    log: Path,
    metrics_port: int,
    *,
    log_level: str = "INFO",
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kairos.cli",
                "ticker",
                "--instance",
                instance,
                "--state-dir",
                str(state_dir),
                "--bootstrap-servers",
                settings.bootstrap_servers,
                "--topic-prefix",
                settings.topic_prefix,
                "--schedules-partitions",
                str(settings.schedules_partitions),
                "--metrics-port",
                str(metrics_port),
                "--log-level",
                log_level,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_until_held(
    ticker: subprocess.Popen[bytes], port: int, size: int, log: Path, timeout_s: float = 900
) -> None:
    """Wait until the ticker holds `size` schedules (it consumed every upsert)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            held = metric(port, "kairos_ticker_schedules_held").get("", 0.0)
        except OSError:
            held = 0.0
        if held >= size:
            return
        if time.monotonic() > deadline or ticker.poll() is not None:
            raise RuntimeError(f"the ticker never held {size} schedules; see {log}")
        time.sleep(0.5)
