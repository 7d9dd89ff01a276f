"""`kairos console`'s process: the follower filling the view, the audits' thread, and the web
server, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import socket
from types import FrameType
from urllib.parse import urlsplit

import uvicorn

from kairos.services.console.acting import ActionDoor
from kairos.services.console.actions import AdminTeams
from kairos.services.console.app import Console, build_app
from kairos.services.console.audits import AuditJobs, AuditRunner
from kairos.services.console.documents import LiveGroup
from kairos.services.console.door import LOCAL_HOSTS, DoorConfig, RateLimit
from kairos.services.console.follower import ViewFollower
from kairos.services.console.herd import ComingHerd
from kairos.services.console.identity import Sessions, TrustedProxy, Users
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
    `view_url`) survives, and is resumed where it was next time. With `users` or a trusted
    proxy, signed-in users act on their teams' schedules (pause, resume, trigger, backfill) and
    request audits; without, the console is read-only."""
    state_dir, (host, port) = settings.state_dir, settings.listen
    view = ConsoleView(settings.view_url or f"{SQLITE_SCHEME}{(state_dir / VIEW_FILE).resolve()}")
    follower = ViewFollower(kafka, view)
    audits = AuditJobs(view, audit_runner)
    group = LiveGroup(kafka, settings.group_id or kafka.deployment_id(TICKER_GROUP))
    door = door_config(settings, users)
    actions = (
        None if not door.knows_anyone else ActionDoor(kafka, AdminTeams(kafka), settings.team_keys)
    )
    herd = ComingHerd(view)
    console = Console(view, follower, group, audits, herd, door, actions)
    follower.start()
    # No proxy headers: the peer address is the socket's, which the trusted proxy rule needs.
    config = uvicorn.Config(
        build_app(console), host=host, port=port, log_level="warning", proxy_headers=False
    )
    server = _Server(config)
    # Bound here, so that port 0 takes a free port and the address is logged once it listens:
    # `kairos dev up` and the tests read it from the log.
    listening = socket.create_server((host, port))
    bound_host, bound_port = listening.getsockname()[:2]
    logger.info("console view %s, following %s", shown_url(view.url), kafka.bootstrap_servers)
    logger.info(
        "console serving on http://%s:%d (%s)",
        bound_host,
        bound_port,
        "read-only" if actions is None else "actions allowed to signed-in users",
    )
    try:
        server.run(sockets=[listening])
    finally:
        audits.stop()
        herd.close()
        if actions is not None:
            actions.admins.close()
        follower.stop()


def door_config(settings: ConsoleSettings, users: Users | None) -> DoorConfig:
    """Who the console answers and how they sign in, from its settings."""
    hosts = set(LOCAL_HOSTS) | set(settings.allowed_hosts)
    listen_host = settings.listen[0].lower()
    if listen_host not in ("0.0.0.0", "::", ""):
        hosts.add(listen_host)
    if settings.public_origin is not None:
        hosts.add(urlsplit(settings.public_origin).hostname or "")
    proxy = None
    if settings.trusted_proxies:
        proxy = TrustedProxy(
            settings.trusted_proxies,
            settings.proxy_user_header,
            settings.proxy_groups_header,
            settings.proxy_group_prefix,
        )
    return DoorConfig(
        frozenset(hosts),
        Sessions.with_secret_file(settings.session_secret_file, settings.session_lifetime_s),
        users,
        proxy,
        settings.public_origin,
        settings.require_login,
        RateLimit(settings.posts_per_minute),
    )
