"""Calendars on the secured three-broker cluster: each role reads or writes them with only its
own ACLs; calendar writes are the calendar-publisher's, and a producer is told which ACL it
lacks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.streams.kafka.acls import Role
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.calendar_reader import (
    CalendarReadError,
    read_calendar_history,
    read_calendars,
)
from tests.cluster.test_secured_flow import SecuredDeployment, _deployment


def _seeded(path: Path) -> Path:
    options = ["--market", "NYSE", "--years", "2026-2027", "--id", "nyse", "--owner", "markets"]
    seeded = CliRunner().invoke(app, ["calendars", "seed", *options, "-o", str(path)])
    assert seeded.exit_code == 0, seeded.output
    return path


def _as(deployment: SecuredDeployment, role: Role) -> KafkaSettings:
    """The deployment's settings with the client properties of `role`'s user."""
    lines = deployment.properties(deployment.users[role]).read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    properties = {key.strip(): value.strip() for key, value in pairs}
    return deployment.settings.model_copy(update={"properties": properties})


def test_calendar_publishers_publish_calendars_tickers_and_auditors_read_them(
    cluster_bootstrap: str,
    cluster_properties_file: Callable[[str], Path],
    cluster_create_user: Callable[..., str],
    cluster_admin: AdminClient,
    tmp_path: Path,
) -> None:
    deployment = _deployment(
        cluster_bootstrap, cluster_properties_file, cluster_create_user, cluster_admin
    )
    publisher = deployment.users[Role.CALENDAR_PUBLISHER]

    applied = deployment.kairos(
        publisher, "calendars", "apply", "-f", str(_seeded(tmp_path / "c.yaml"))
    )

    assert applied.exit_code == 0, applied.output
    assert "create     nyse  (version 0)" in applied.stdout
    listed = deployment.kairos(publisher, "calendars", "list")
    assert listed.exit_code == 0, listed.output
    assert read_calendars(_as(deployment, Role.TICKER)).get("nyse") is not None
    history = read_calendar_history(_as(deployment, Role.AUDITOR))
    assert [(change.calendar_id, change.version) for change in history] == [("nyse", 0)]
    with pytest.raises(CalendarReadError, match="authoriz"):
        read_calendars(_as(deployment, Role.EXECUTOR))


def test_a_producer_may_not_write_calendars_and_is_told_which_acl(
    cluster_bootstrap: str,
    cluster_properties_file: Callable[[str], Path],
    cluster_create_user: Callable[..., str],
    cluster_admin: AdminClient,
    tmp_path: Path,
) -> None:
    """A team that only schedules cannot write the calendars topic (C3): the producer role has
    no WRITE on it; `kairos calendars apply` names the calendar-publisher's grant it lacks."""
    deployment = _deployment(
        cluster_bootstrap, cluster_properties_file, cluster_create_user, cluster_admin
    )
    producer = deployment.users[Role.PRODUCER]

    refused = deployment.kairos(
        producer, "calendars", "apply", "-f", str(_seeded(tmp_path / "c.yaml"))
    )

    assert refused.exit_code == 2
    calendars = deployment.settings.layout.name(TopicRole.CALENDARS)
    assert f"it needs WRITE on topic {calendars}." in refused.output, refused.output
    assert read_calendar_history(_as(deployment, Role.AUDITOR)) == []
