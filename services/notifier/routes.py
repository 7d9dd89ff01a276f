"""The routes file: read at start (a file that cannot be used stops the notifier, naming what to
fix) and again whenever it changes (a changed file that cannot be used is logged, and the routes
read before stay in force)."""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml

from kairos.core.notifications import Route, RouteProblem, RoutesFileError, parse_routes

logger = logging.getLogger(__name__)

SHORTEST_SECRET = 16


@dataclass(frozen=True)
class Routes:
    """Each team's usable routes, each webhook's signing secret by (team, route name), and the
    routes that cannot be used, each reported to its team."""

    by_team: dict[str, tuple[Route, ...]]
    secrets: dict[tuple[str, str], bytes]
    problems: tuple[RouteProblem, ...] = ()

    def of(self, team: str) -> tuple[Route, ...]:
        return self.by_team.get(team, ())

    @property
    def broken(self) -> frozenset[str]:
        """Teams that wrote routes of which none can be used."""
        return frozenset(p.team for p in self.problems if not self.by_team.get(p.team))


def load_routes(path: Path) -> Routes:
    """Raises `RoutesFileError` saying what to fix when the file as a whole cannot be read; a
    route that cannot be used (a bad field, a secret file missing or short) is left out and
    listed in `problems`."""
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
    parsed = parse_routes(document, f"--routes-file {path}")
    by_team, secrets, problems = {}, {}, list(parsed.problems)
    for team, routes in parsed.by_team.items():
        usable = []
        for position, route in enumerate(routes, start=1):
            if route.secret_file is not None:
                try:
                    secrets[team, route.name] = _secret(route.secret_file)
                except RoutesFileError as error:
                    problems.append(RouteProblem(team, position, f"{route.name}: {error}"))
                    continue
            usable.append(route)
        by_team[team] = tuple(usable)
    return Routes(by_team, secrets, tuple(problems))


def _secret(path: Path) -> bytes:
    try:
        secret = path.read_bytes().strip()
    except OSError as error:
        raise RoutesFileError(f"secret_file {path}: {error.strerror}") from None
    if len(secret) < SHORTEST_SECRET:
        raise RoutesFileError(
            f"secret_file {path} holds {len(secret)} bytes; write at least {SHORTEST_SECRET} "
            f"(e.g. `openssl rand -hex 32 > {path}`)"
        )
    return secret


class RoutesWatch:
    """The routes in force, read again when the file's modification time changes; `unreported`
    hands each read's route problems out once, for the notifier to report to their teams."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.routes = load_routes(path)
        self._seen = path.stat().st_mtime_ns
        self._unreported = list(self.routes.problems)

    def unreported(self) -> list[RouteProblem]:
        found, self._unreported = self._unreported, []
        return found

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
                self._unreported = list(self.routes.problems)
                logger.info(
                    "routes file %s read again: %d team(s)", self._path, len(self.routes.by_team)
                )
            except RoutesFileError as error:
                logger.error("%s; the routes read before stay in force", error)
        return self.routes
