"""Kairos services as real OS processes, so failure tests can kill them with real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kairos.cli.executor import executor_arguments
from kairos.cli.ticker import ticker_arguments
from kairos.services.ticker.settings import Ownership
from kairos.streams.kafka.settings import KafkaSettings
from tests.helpers import eventually


class ServiceProcess:
    """One `python -m kairos.cli …` process with its log in a file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kairos.cli", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float = 60.0) -> None:
        def logged() -> bool:
            assert self.process.poll() is None, f"process exited:\n{self.log()[-3000:]}"
            return text in self.log()

        eventually(logged, timeout_s=timeout_s, interval_s=0.2, message=f"no {text!r} in log")

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        self._log.close()

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # Never leave a process behind a failed test; the caller sees it did not stop.
            self.process.kill()
            code = self.process.wait()
        self._log.close()
        return code


def start_ticker(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    log_dir: Path,
    *,
    session_timeout_ms: int = 3000,
    log_level: str = "INFO",
    group_id: str | None = None,
    env: dict[str, str] | None = None,
    ownership: Ownership | None = None,
    signature_max_age_s: float | None = None,
    metrics_port: int | None = None,
) -> ServiceProcess:
    arguments = ticker_arguments(
        settings,
        instance,
        state_dir,
        session_timeout_ms=session_timeout_ms,
        metrics_port=metrics_port,
        log_level=log_level,
        group_id=group_id,
        ownership=ownership,
        signature_max_age_s=signature_max_age_s,
    )
    return ServiceProcess(arguments, log_dir / f"{instance}.log", env=env)


def start_executor(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    log_dir: Path,
    *,
    dedupe_url: str | None = None,
    dedupe_retention: str | None = None,
    handlers: str | None = None,
    kinds: str | None = None,
    lease: str = "2s",
    shutdown_grace: str = "10s",
    offset_commit_interval: str = "200ms",
    concurrency: int = 4,
    session_timeout_ms: int = 3000,
    metrics_port: int | None = None,
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
) -> ServiceProcess:
    """An executor process with test timings: short leases, frequent commits, quick failover.

    Its consumer group is the deployment's default, `<topic prefix>executors`, so executors of
    different tests (each its own prefix) never share a group.
    """
    arguments = executor_arguments(
        settings,
        instance,
        state_dir,
        dedupe_url=dedupe_url,
        dedupe_retention=dedupe_retention,
        handlers=handlers,
        kinds=kinds,
        concurrency=concurrency,
        lease=lease,
        shutdown_grace=shutdown_grace,
        offset_commit_interval=offset_commit_interval,
        poll_interval="100ms",
        session_timeout_ms=session_timeout_ms,
        metrics_port=metrics_port,
        log_level=log_level,
    )
    return ServiceProcess(arguments, log_dir / f"{instance}.log", env=env)
