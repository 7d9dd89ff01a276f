"""The one HTTP server of a ticker or executor process: `/metrics`, `/livez` and `/readyz`.

The probes answer from `LoopHealth`, plain values the main loop sets once per turn; a request
does no I/O and takes no lock the loop holds, so a probe answers however busy the loop is,
and says so when the loop stopped turning. docs/operations.md, "Probes and metrics endpoints",
says what each endpoint answers.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from kairos.core.errors import KairosError
from kairos.streams.kafka.settings import KafkaSettings

logger = logging.getLogger(__name__)

DEFAULT_METRICS_HOST = "127.0.0.1"
"""Where the server listens unless told otherwise: this host only, not every interface."""
LIBRDKAFKA_MAX_POLL_INTERVAL_MS = 300_000
"""librdkafka's default `max.poll.interval.ms`."""
STALL_SLACK_S = 30.0
"""Beyond `max.poll.interval.ms`, before a loop that completed no turn counts as stopped."""


def stall_limit_s(kafka: KafkaSettings) -> float:
    """How long the main loop may go without completing a turn before `/livez` fails.

    `max.poll.interval.ms` (librdkafka's default, 300 s, unless the client properties set it):
    a group member that does not consume for that long is dropped from its group as stuck, so
    no turn of a healthy loop (a take-over's restore, a transaction, a dedupe store call) may
    take longer; plus `STALL_SLACK_S`. A ticker's transaction call that hangs ends the process
    sooner, through its watchdog (exit 75).
    """
    interval_ms = int(kafka.properties.get("max.poll.interval.ms", LIBRDKAFKA_MAX_POLL_INTERVAL_MS))
    return interval_ms / 1000 + STALL_SLACK_S


class LoopHealth:
    """What the probes answer from: set by the main loop, read by the server's threads.

    Each value is replaced whole by one assignment, so a reader sees the old value or the new.
    """

    def __init__(self, stall_limit_s: float, now_s: float) -> None:
        self.stall_limit_s = stall_limit_s
        self._last_turn_s = now_s
        self._unready_because: str | None = "starting"

    def turned(self, now_s: float, unready_because: str | None) -> None:
        """The loop completed a turn at `now_s` (`time.monotonic()`); `unready_because` says
        why the service is not ready, `None` once it is."""
        self._last_turn_s = now_s
        self._unready_because = unready_because

    def liveness(self, now_s: float) -> str | None:
        """Why the loop counts as stopped at `now_s`, or `None` while it turns."""
        idle_s = now_s - self._last_turn_s
        if idle_s <= self.stall_limit_s:
            return None
        return (
            f"the main loop has completed no turn for {idle_s:.0f}s "
            f"(limit {self.stall_limit_s:.0f}s)"
        )

    def readiness(self) -> str | None:
        """Why the service is not ready, or `None` when it is."""
        return self._unready_because


def group_readiness(connected: bool, assigned: bool) -> str | None:
    """Why a group member (a ticker, an executor, a notifier) is not ready, or `None` once it
    is: once the group gave it an assignment. An empty one counts: a member beyond the
    partitions' count is a standby, taking partitions over when another member leaves, and ready
    for that."""
    if not connected:
        return "not connected: opening its clients to join the group"
    if not assigned:
        return "joining the group: no partition assignment received yet"
    return None


def probe_server(
    host: str, port: int | None, registry: CollectorRegistry, health: LoopHealth
) -> AbstractContextManager[object]:
    """The probe server for the `with` block, listening on `host`:`port`; none without a port."""
    return nullcontext() if port is None else ProbeServer((host, port), registry, health)


class ProbeServerError(KairosError):
    """The probe server cannot listen where it was told to."""


class ProbeServer:
    """Serves `/metrics` of `registry` and the probes of `health` on a daemon thread."""

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        health: LoopHealth,
    ) -> None:
        host, port = address
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            self._server = _Server(address, family, registry, health)
        except OSError as error:
            raise ProbeServerError(
                f"--metrics-host {host} --metrics-port {port}: cannot listen there "
                f"({error.strerror or error}); choose a free port and an address of this host "
                "(127.0.0.1, or 0.0.0.0 for every interface)"
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="probe-server", daemon=True
        )
        self._thread.start()
        logger.info("serving /metrics, /livez and /readyz on %s port %d", *self.address)

    @property
    def address(self) -> tuple[str, int]:
        """The address it listens on (the port chosen, when asked for port 0)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ProbeServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        registry: CollectorRegistry,
        health: LoopHealth,
    ) -> None:
        self.address_family = family
        self.registry = registry
        self.health = health
        super().__init__(address, _Handler)


_TEXT = "text/plain; charset=utf-8"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            encode, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._reply(200, encode(self.server.registry), content_type)
        elif path == "/livez":
            self._answer(self.server.health.liveness(time.monotonic()))
        elif path == "/readyz":
            self._answer(self.server.health.readiness())
        else:
            self._reply(404, b"not found; this server answers /metrics, /livez and /readyz\n")

    def _answer(self, problem: str | None) -> None:
        if problem is None:
            self._reply(200, b"ok\n")
        else:
            self._reply(503, f"{problem}\n".encode())

    def _reply(self, status: int, body: bytes, content_type: str = _TEXT) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Log nothing: a probe every few seconds would fill the service's log."""
