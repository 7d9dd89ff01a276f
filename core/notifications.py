"""Telling a team: where it is told (its routes), what about, and what a receiver's answer means.

Pure rules, no I/O: the notifier (`kairos.services.notifier`) reads the events and delivers.

- A **notice** is one event worth telling, with an id that stays the same however often it is
  delivered: the receivers' idempotency key (a redelivery after a notifier's crash carries it
  again).
- A **route** belongs to one team and says how (a signed webhook, a Slack-compatible incoming
  webhook, email) and about what (`about`). A notice goes to the routes of the team the ticker
  fired the run for, or that a refused change is reported to, and to no other team's.
- A receiver's answer is judged once: 2xx delivered; 408, 429, 5xx and no answer retried with
  backoff and jitter; a redirect or another 4xx never retried (the route is wrong, and the team
  is told where it reads its rejections).
"""

from __future__ import annotations

import random
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kairos.core.errors import KairosError
from kairos.core.ownership import TEAM_NAME
from kairos.core.schedule import Duration


class Topic(StrEnum):
    """What a team can be told about."""

    FAILED = "failed"
    """A run ended failed for good: its last attempt failed, or it could not run."""
    DEADLINE_MISSED = "deadline_missed"
    LATE = "late"
    """A run started more than the route's `late_after` after its nominal instant."""
    REFUSED = "refused"
    """A change the team signed was refused (ownership, quota, validation)."""
    SKIPPED = "skipped"
    """An occurrence skipped (misfire policy, overlap, calendar or blackout); off by default."""


DEFAULT_TOPICS = frozenset({Topic.FAILED, Topic.DEADLINE_MISSED, Topic.REFUSED})
ROUTE_KINDS = ("webhook", "slack", "email")
_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+\.[^@\s<>]+$")


def _usable_url(url: str) -> bool:
    """Whether a sender can reach `url` as it is written: the checks the HTTP client would make
    at sending time, made when the route is read instead."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
        host = parts.hostname or ""
        host.encode("idna")
    except (ValueError, UnicodeError):
        return False
    return parts.scheme in ("http", "https") and bool(host) and not re.search(r"\s", url)


class RoutesFileError(KairosError):
    """The routes file cannot be used; the message names the team, the route and the fix."""


class Route(BaseModel):
    """One way one team is told."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=63)
    webhook: str | None = None
    """A URL the notice is POSTed to as JSON, signed with `secret_file`'s secret."""
    slack: str | None = None
    """A Slack-compatible incoming-webhook URL: the notice is POSTed as `{"text": …}`."""
    email: tuple[str, ...] = ()
    """Addresses the notice is mailed to, through the notifier's SMTP server."""
    secret_file: Path | None = None
    """The webhook's signing secret (at least 16 bytes): receivers verify each body with it."""
    about: frozenset[Topic] = DEFAULT_TOPICS
    """What the route is told about (YAML reads a key `on` as true, hence the name)."""
    late_after: Duration | None = None
    """With `late` in `about`: how late a start must be to be told."""

    @field_validator("webhook", "slack")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not _usable_url(url):
            raise ValueError(f"{url!r} is not an http:// or https:// URL with a host and port")
        return url

    @field_validator("email")
    @classmethod
    def _addresses(cls, addresses: tuple[str, ...]) -> tuple[str, ...]:
        bad = [address for address in addresses if not _ADDRESS.match(address)]
        if bad:
            raise ValueError(f"{', '.join(bad)}: not an email address like oncall@example.com")
        return addresses

    @model_validator(mode="after")
    def _one_kind(self) -> Route:
        kinds = [kind for kind in ROUTE_KINDS if getattr(self, kind)]
        if len(kinds) != 1:
            raise ValueError(f"name exactly one of {', '.join(ROUTE_KINDS)} (found {kinds or 0})")
        if self.webhook and self.secret_file is None:
            raise ValueError("a webhook needs secret_file, the secret its receiver verifies with")
        if (Topic.LATE in self.about) != (self.late_after is not None):
            raise ValueError("`late` in `about` and late_after go together: set both or neither")
        return self

    @property
    def kind(self) -> Literal["webhook", "slack", "email"]:
        return "webhook" if self.webhook else "slack" if self.slack else "email"


@dataclass(frozen=True)
class RouteProblem:
    """A route of one team that cannot be used: the team is told, the others' routes go on."""

    team: str
    position: int
    """Its place in the team's list, from 1."""
    reason: str

    def shown(self, source: str) -> str:
        return f"{source}: team {self.team}, route {self.position}: {self.reason}"


@dataclass(frozen=True)
class ParsedRoutes:
    by_team: dict[str, tuple[Route, ...]]
    problems: tuple[RouteProblem, ...]


def parse_routes(document: object, source: str) -> ParsedRoutes:
    """Each team's usable routes from a routes file's parsed YAML, and the routes that are not
    (named by team, place and what to write). A file whose shape is wrong raises
    `RoutesFileError`: then no team's routes can be read from it."""
    shaped = isinstance(document, Mapping) and set(document) == {"teams"}
    teams = document["teams"] if shaped else None  # type: ignore[index]
    if not isinstance(teams, Mapping):
        raise RoutesFileError(f"{source}: write one key, `teams:`, mapping each team to a list")
    by_team: dict[str, tuple[Route, ...]] = {}
    problems: list[RouteProblem] = []
    for team, entries in teams.items():
        if not TEAM_NAME.fullmatch(str(team)):
            raise RoutesFileError(f"{source}: {team!r} is not a team name (e.g. payments-eu)")
        if not isinstance(entries, list):
            raise RoutesFileError(f"{source}: team {team}: write a list of routes")
        routes, names = [], set()
        for position, entry in enumerate(entries, start=1):
            try:
                route = Route.model_validate(entry)
            except ValidationError as invalid:
                first = invalid.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                problems.append(
                    RouteProblem(team, position, f"{where}: {first['msg']}".lstrip(": "))
                )
                continue
            if route.name in names:
                problems.append(RouteProblem(team, position, f"route {route.name!r} twice"))
                continue
            names.add(route.name)
            routes.append(route)
        by_team[team] = tuple(routes)
    return ParsedRoutes(by_team, tuple(problems))


@dataclass(frozen=True, slots=True)
class Notice:
    """One event worth telling one team."""

    notice_id: str
    """Stable across redeliveries: the receivers' idempotency key."""
    team: str
    topic: Topic
    schedule_id: str | None
    run_id: str | None
    at: datetime
    summary: str
    """One line a person reads first."""
    details: Mapping[str, Any]

    def document(self) -> dict[str, Any]:
        return {
            "id": self.notice_id,
            "team": self.team,
            "topic": self.topic.value,
            "schedule_id": self.schedule_id,
            "run_id": self.run_id,
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "summary": self.summary,
            "details": dict(self.details),
        }


def run_event_topic(event: Mapping[str, Any]) -> Topic | None:
    """What a run event can be told as (lateness needs the route's threshold: `wanted`)."""
    kind = event["kind"]
    if kind == "dead_lettered":
        return Topic.FAILED
    if kind == "deadline_missed":
        return Topic.DEADLINE_MISSED
    if kind == "skipped":
        return Topic.SKIPPED
    # A retry starts as late as its backoff made it: only a first attempt's start is told late.
    if kind == "started" and event.get("started_at") is not None and event["attempt"] == 1:
        return Topic.LATE
    return None


def lateness(event: Mapping[str, Any]) -> timedelta:
    started, nominal = event["started_at"], event["nominal_at"]
    assert isinstance(started, datetime) and isinstance(nominal, datetime)
    return started - nominal


def wanted(route: Route, notice: Notice) -> bool:
    """Whether `route` asked to be told `notice`."""
    if notice.topic not in route.about:
        return False
    if notice.topic is Topic.LATE:
        assert route.late_after is not None  # a route with `late` has it (`Route._one_kind`)
        late = timedelta(seconds=float(notice.details["late_s"]))
        return late > route.late_after
    return True


class Answer(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    GIVE_UP = "give_up"


def judge_status(status: int, location: str | None) -> tuple[Answer, str]:
    """What an HTTP receiver's status means for the delivery, and why in words."""
    if 200 <= status < 300:
        return Answer.DELIVERED, f"HTTP {status}"
    if 300 <= status < 400:
        where = f" to {location}" if location else ""
        return Answer.GIVE_UP, (
            f"HTTP {status}: the receiver redirects{where}; redirects are not followed, so "
            "point the route at the final URL"
        )
    if status in (408, 429) or status >= 500:
        return Answer.RETRY, f"HTTP {status}"
    return Answer.GIVE_UP, f"HTTP {status}: the receiver refuses the notice; check the route"


def retry_delay(retry: int, first: timedelta, longest: timedelta, rng: random.Random) -> timedelta:
    """The wait before retry `retry` (1 for the first): exponential, capped, with full jitter
    over its upper half so that notifiers retrying one receiver do not arrive together."""
    ceiling_s = min(first.total_seconds() * 2 ** (retry - 1), longest.total_seconds())
    return timedelta(seconds=ceiling_s / 2 * (1 + rng.random()))
