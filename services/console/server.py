"""`kairos console`'s process: the follower filling the view, the audits' thread, and the web
server, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import socket
from types import FrameType

import uvicorn

from kairos.services.console.acting import ActionDoor
from kairos.services.console.actions import Users
from kairos.services.console.app import Console, build_app
from kairos.services.console.audits import AuditJobs, AuditRunner
from kairos.services.console.documents import LiveGroup
from kairos.services.console.follower import ViewFollower
from kairos.services.console.herd import ComingHerd
from kairos.services.console.settings import ConsoleSettings
from kairos.services.console.view import ConsoleView
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.sql.dialects import SQLITE_SCHEME, shown_url

logger = logging.getLogger(__name__)

VIEW_FILE = "console-view.sqlite"


class _Server(uvicorn.Server):
    """uvicorn's server, stopping cleanly on SIGTERM or Ctrl-C with exit status 0 as every
    Kairos service does: uvicorn itself raises the signal again once it has shut down."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._captured_signals.clear()


def run_console(
    kafka: KafkaSettings,
    settings: ConsoleSettings,
    audit_runner: AuditRunner,
    users: Users | None = None,
) -> None:
    """Serve until a signal. The view (by default a SQLite file in the state directory, else at
    `view_url`) survives, and is resumed where it was next time. With `users`, they may act
    (pause, resume, trigger); without, the console is read-only."""
    state_dir, (host, port) = settings.state_dir, settings.listen
    view = ConsoleView(settings.view_url or f"{SQLITE_SCHEME}{(state_dir / VIEW_FILE).resolve()}")
    follower = ViewFollower(kafka, view)
    audits = AuditJobs(view, audit_runner)
    group = LiveGroup(kafka, settings.group_id or kafka.deployment_id(TICKER_GROUP))
    door = None if users is None else ActionDoor(users, kafka)
    herd = ComingHerd(view)
    console = Console(view, follower, group, audits, herd, door)
    follower.start()
    server = _Server(uvicorn.Config(build_app(console), host=host, port=port, log_level="warning"))
    # Bound here, so that port 0 takes a free port and the address is logged once it listens:
    # `kairos dev up` and the tests read it from the log.
    listening = socket.create_server((host, port))
    bound_host, bound_port = listening.getsockname()[:2]
    logger.info("console view %s, following %s", shown_url(view.url), kafka.bootstrap_servers)
    logger.info(
        "console serving on http://%s:%d (%s)",
        bound_host,
        bound_port,
        "read-only" if users is None else f"actions allowed to {len(users.tokens)} user(s)",
    )
    try:
        server.run(sockets=[listening])
    finally:
        audits.stop()
        herd.close()
        follower.stop()
