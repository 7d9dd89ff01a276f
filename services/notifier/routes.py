"""The routes file: read at start (a file that cannot be used stops the notifier, naming what to
fix) and again whenever it changes (a changed file that cannot be used is logged, and the routes
read before stay in force)."""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml

from kairos.core.notifications import Route, RoutesFileError, parse_routes

logger = logging.getLogger(__name__)

SHORTEST_SECRET = 16


@dataclass(frozen=True)
class Routes:
    """Each team's routes, and each webhook's signing secret by route name."""

    by_team: dict[str, tuple[Route, ...]]
    secrets: dict[tuple[str, str], bytes]

    def of(self, team: str) -> tuple[Route, ...]:
        return self.by_team.get(team, ())


def load_routes(path: Path) -> Routes:
    """Raises `RoutesFileError` saying what to fix."""
    try:
        mode = path.stat().st_mode
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise RoutesFileError(f"--routes-file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise RoutesFileError(f"--routes-file {path}: not YAML: {error}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise RoutesFileError(
            f"--routes-file {path} is readable by other users; `chmod 600 {path}`"
        )
    by_team = parse_routes(document, f"--routes-file {path}")
    secrets = {}
    for team, routes in by_team.items():
        for route in routes:
            if route.secret_file is not None:
                secrets[team, route.name] = _secret(team, route.name, route.secret_file)
    return Routes(by_team, secrets)


def _secret(team: str, name: str, path: Path) -> bytes:
    try:
        secret = path.read_bytes().strip()
    except OSError as error:
        raise RoutesFileError(
            f"team {team} route {name}: secret_file {path}: {error.strerror}"
        ) from None
    if len(secret) < SHORTEST_SECRET:
        raise RoutesFileError(
            f"team {team} route {name}: secret_file {path} holds {len(secret)} bytes; write at "
            f"least {SHORTEST_SECRET} (e.g. `openssl rand -hex 32 > {path}`)"
        )
    return secret


class RoutesWatch:
    """The routes in force, read again when the file's modification time changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.routes = load_routes(path)
        self._seen = path.stat().st_mtime_ns

    def refresh(self) -> Routes:
        try:
            seen = self._path.stat().st_mtime_ns
        except OSError as error:
            logger.error(
                "routes file %s unreadable (%s): the routes read before stay", self._path, error
            )
            return self.routes
        if seen != self._seen:
            self._seen = seen
            try:
                self.routes = load_routes(self._path)
                logger.info(
                    "routes file %s read again: %d team(s)", self._path, len(self.routes.by_team)
                )
            except RoutesFileError as error:
                logger.error("%s; the routes read before stay in force", error)
        return self.routes
