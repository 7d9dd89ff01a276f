"""The probe server on real sockets, and a real ticker loop that stops turning.

The ticker is the real `Ticker.run` on the in-memory cluster (tests/fakes): its clock is
gated, so a test can hold the loop inside a turn, as a hung call would, while the probe server's
thread goes on answering.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kairos.services.build import DISTRIBUTION, register_build_info
from kairos.services.probes import DEFAULT_METRICS_HOST, LoopHealth, ProbeServer, ProbeServerError
from kairos.services.ticker.service import Ticker
from kairos.services.ticker.settings import TickerSettings
from tests.fakes.kafka import FakeTickerClients
from tests.fakes.ticker_world import World
from tests.helpers import eventually
from tests.probe_client import ANOTHER_LOOPBACK, free_port, get


@contextmanager
def _serving(host: str, health: LoopHealth) -> Iterator[int]:
    registry = CollectorRegistry()
    register_build_info(registry)
    with ProbeServer((host, 0), registry, health) as server:
        yield server.address[1]


def test_the_default_address_is_this_host_only() -> None:
    health = LoopHealth(stall_limit_s=60, now_s=time.monotonic())
    with _serving(DEFAULT_METRICS_HOST, health) as port:
        assert get(port, "/livez")[0] == 200
        status, why = get(port, "/livez", host=ANOTHER_LOOPBACK)
        assert status == 0 and "refused" in why
    with _serving("0.0.0.0", health) as port:
        assert get(port, "/livez", host=ANOTHER_LOOPBACK)[0] == 200


def test_the_server_answers_metrics_and_the_probes_and_nothing_else() -> None:
    health = LoopHealth(stall_limit_s=60, now_s=time.monotonic())
    with _serving(DEFAULT_METRICS_HOST, health) as port:
        status, metrics = get(port, "/metrics")
        assert status == 200
        assert f'kairos_build_info{{version="{version(DISTRIBUTION)}"}} 1.0' in metrics
        assert get(port, "/readyz") == (503, "starting\n")
        health.turned(time.monotonic(), unready_because=None)
        assert get(port, "/readyz") == (200, "ok\n")
        assert get(port, "/livez") == (200, "ok\n")
        assert get(port, "/")[0] == 404


def test_a_port_taken_is_one_line_naming_the_options() -> None:
    health = LoopHealth(stall_limit_s=60, now_s=time.monotonic())
    with socket.create_server((DEFAULT_METRICS_HOST, 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ProbeServerError) as raised:
            ProbeServer((DEFAULT_METRICS_HOST, port), CollectorRegistry(), health)
    message = str(raised.value)
    assert message.startswith(f"--metrics-host 127.0.0.1 --metrics-port {port}: cannot listen")
    assert "\n" not in message


class _Gate:
    """A clock that stops the loop calling it while closed."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.open = threading.Event()

    def __call__(self) -> datetime:
        self.open.wait()
        return self._world.clock()


def test_livez_fails_while_the_ticker_loop_is_held_and_readyz_follows_the_assignment(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    port = free_port()
    gate = _Gate(world)
    settings = TickerSettings(instance="t1", state_dir=tmp_path / "t1", metrics_port=port)
    clients = FakeTickerClients(world.kafka, world.clock)
    ticker = Ticker(world.settings, settings, gate, world.codecs, clients)
    ticker.health.stall_limit_s = 0.5  # instead of max.poll.interval.ms and its slack
    stop = threading.Event()
    loop = threading.Thread(target=ticker.run, args=(stop,))
    loop.start()
    try:
        # Held in its first turn, before the group could assign it anything.
        eventually(lambda: get(port, "/livez")[0] == 503, timeout_s=10, message="/livez")
        status, why = get(port, "/readyz")
        assert (status, why) == (503, "not connected: opening its clients to join the group\n")
        assert "the main loop has completed no turn for" in get(port, "/livez")[1]
        gate.open.set()
        eventually(lambda: get(port, "/readyz") == (200, "ok\n"), timeout_s=10, message="ready")
        assert get(port, "/livez") == (200, "ok\n")
        gate.open.clear()  # a turn that never ends, as a hung call would
        eventually(lambda: get(port, "/livez")[0] == 503, timeout_s=10, message="/livez held")
        gate.open.set()
        eventually(lambda: get(port, "/livez")[0] == 200, timeout_s=10, message="/livez again")
    finally:
        gate.open.set()
        stop.set()
        loop.join(timeout=30)
    assert not loop.is_alive()
    assert get(port, "/livez")[0] == 0, "the server outlived the loop"
