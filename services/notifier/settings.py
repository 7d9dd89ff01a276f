"""How one notifier process runs: one frozen model, filled at the CLI edge."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated

from pydantic import Field

from kairos.core.durations import parse_duration
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.services.settings_fields import ServiceSettings, Setting


class NotifierSettings(ServiceSettings):
    """How one notifier runs; `kairos notifier` takes each field as an option."""

    instance: Annotated[str, Setting(env="KAIROS_NOTIFIER_INSTANCE")] = Field(
        min_length=1, pattern=r"^[A-Za-z0-9._-]+$"
    )
    """This notifier's unique name, in its logs and the dead letters it writes."""
    routes_file: Annotated[Path, Setting(env="KAIROS_NOTIFIER_ROUTES_FILE")]
    """The teams' routes (YAML, chmod 600: it holds webhook URLs); read again when it changes."""
    group_id: Annotated[str | None, Setting(env="KAIROS_NOTIFIER_GROUP")] = None
    """Consumer group of the notifiers; default: the deployment's, <topic prefix>notifiers."""
    smtp_host: Annotated[str | None, Setting(env="KAIROS_NOTIFIER_SMTP_HOST")] = None
    """The SMTP server email routes are sent through; without it email routes fail."""
    smtp_port: Annotated[int, Setting(env="KAIROS_NOTIFIER_SMTP_PORT")] = Field(
        default=25, ge=1, le=65535
    )
    """The SMTP server's port."""
    smtp_from: Annotated[str, Setting(env="KAIROS_NOTIFIER_SMTP_FROM")] = (
        "kairos-notifier@localhost"
    )
    """The sender of the notifier's mails."""
    attempts: Annotated[int, Setting(env="KAIROS_NOTIFIER_ATTEMPTS")] = Field(
        default=6, ge=1, le=20
    )
    """Tries of one notice on one route before it is dead-lettered, reported to the team."""
    first_retry: Annotated[
        timedelta,
        Setting(env="KAIROS_NOTIFIER_FIRST_RETRY", parse=parse_duration, metavar="DURATION"),
    ] = Field(default=timedelta(seconds=2), gt=timedelta(0))
    """The wait before the first retry; each further one doubles it, with jitter."""
    longest_retry: Annotated[
        timedelta,
        Setting(env="KAIROS_NOTIFIER_LONGEST_RETRY", parse=parse_duration, metavar="DURATION"),
    ] = Field(default=timedelta(minutes=2), gt=timedelta(0))
    """The longest wait between two tries."""
    timeout: Annotated[
        timedelta, Setting(env="KAIROS_NOTIFIER_TIMEOUT", parse=parse_duration, metavar="DURATION")
    ] = Field(default=timedelta(seconds=10), gt=timedelta(0))
    """How long one try waits for a receiver's answer."""
    concurrency: Annotated[int, Setting(env="KAIROS_NOTIFIER_CONCURRENCY")] = Field(
        default=16, ge=1, le=256
    )
    """Deliveries in flight at once, all routes together."""
    per_route: Annotated[int, Setting(env="KAIROS_NOTIFIER_PER_ROUTE")] = Field(
        default=2, ge=1, le=64
    )
    """Deliveries in flight at once on one route: a slow receiver takes no more of the notifier."""
    max_pending: Annotated[int, Setting(env="KAIROS_NOTIFIER_MAX_PENDING")] = Field(
        default=10_000, ge=10
    )
    """Notices read and not yet done (delivered or dead-lettered) before reading pauses."""
    from_beginning: Annotated[bool, Setting(env="KAIROS_NOTIFIER_FROM_BEGINNING")] = False
    """A new notifiers group starts at the topics' beginning (telling what they retain) rather
    than their end; a group that committed resumes where it stopped either way."""
    metrics_host: Annotated[str, Setting(env="KAIROS_NOTIFIER_METRICS_HOST")] = Field(
        default=DEFAULT_METRICS_HOST, min_length=1
    )
    """The address --metrics-port listens on: this host only by default."""
    metrics_port: Annotated[int | None, Setting(env="KAIROS_NOTIFIER_METRICS_PORT")] = Field(
        default=None, ge=0, le=65535
    )
    """Serve /metrics, /livez and /readyz on this port; default: no server."""
