"""The roles' least-privilege ACLs, and refusals turned into the grant that is missing."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import KafkaError

from kairos.streams.kafka.acls import (
    DeploymentNames,
    Operation,
    Pattern,
    Resource,
    Role,
    role_grants,
)
from kairos.streams.kafka.authorization import NotAuthenticatedError, NotAuthorizedError, refusal
from kairos.streams.kafka.settings import KafkaSettings

NAMES = DeploymentNames.of(KafkaSettings(bootstrap_servers="127.0.0.1:9092", topic_prefix="prod."))


def _described(role: Role) -> set[str]:
    return {grant.describe() for grant in role_grants(role, NAMES)}


def test_the_ticker_reads_schedules_writes_runs_and_owns_its_transactional_ids() -> None:
    assert _described(Role.TICKER) == {
        "READ on topic prod.schedules",
        "WRITE on topic prod.schedules",
        "READ on topic prod.ticker-changelog",
        "WRITE on topic prod.ticker-changelog",
        "WRITE on topic prod.runs",
        "WRITE on topic prod.dead-letters",
        "READ on topic prod.dead-letters",
        "DESCRIBE on group prod.schedule-readers",
        "WRITE on topic prod.run-events",
        "READ on topic prod.run-events",
        "DESCRIBE on group prod.history-readers",
        "READ on topic prod.calendars",
        "DESCRIBE on group prod.calendar-readers",
        "READ on topic prod.teams",
        "DESCRIBE on group prod.team-readers",
        "READ on group prod.tickers",
        "DESCRIBE on group prod.restore- (prefixed)",
        "WRITE on transactional-id prod.ticker- (prefixed)",
    }


def test_calendar_publishers_publish_calendars_and_every_reader_judges_them() -> None:
    """Calendar writes are a role of their own (C3): a team that only schedules cannot write
    the calendars topic. Whoever reads calendars reads the teams and the tickers' mode too, to
    count only the changes a signed deployment's tickers count."""
    assert _described(Role.CALENDAR_PUBLISHER) == {
        "WRITE on topic prod.calendars",
        "READ on topic prod.calendars",
        "DESCRIBE on group prod.calendar-readers",
        "READ on topic prod.teams",
        "DESCRIBE on group prod.team-readers",
        "DESCRIBE on topic prod.schedules",
        "DESCRIBE on group prod.tickers",
    }
    judged = {"READ on topic prod.teams", "DESCRIBE on group prod.tickers"}
    assert {"READ on topic prod.calendars", *judged} <= _described(Role.PRODUCER)
    assert "WRITE on topic prod.calendars" not in _described(Role.PRODUCER)
    assert {
        "READ on topic prod.calendars",
        "DESCRIBE_CONFIGS on topic prod.calendars",
        "DESCRIBE on group prod.calendar-readers",
        *judged,
    } <= _described(Role.AUDITOR)
    assert not any("calendars" in g.name for g in role_grants(Role.EXECUTOR, NAMES))


def test_executors_hold_no_right_on_the_schedules() -> None:
    """Team code runs on executors: nothing there may read or change a schedule
    (`pause_on_failure` is the ticker's)."""
    assert not any("schedules" in g.name for g in role_grants(Role.EXECUTOR, NAMES))


def test_no_role_but_the_operator_may_create_topics_and_only_within_its_deployment() -> None:
    for role in Role:
        creates = [g for g in role_grants(role, NAMES) if g.operation is Operation.CREATE]
        if role is Role.OPERATOR:
            assert [(g.name, g.pattern) for g in creates] == [("prod.", Pattern.PREFIXED)]
        else:
            assert creates == []


def test_every_grant_stays_inside_the_deployments_namespace() -> None:
    for role in Role:
        for grant in role_grants(role, NAMES):
            assert grant.name.startswith("prod."), grant


def test_a_producer_cannot_write_runs_and_an_auditor_cannot_write_anything() -> None:
    assert not any("runs" in g.name for g in role_grants(Role.PRODUCER, NAMES))
    assert all(
        g.operation in {Operation.READ, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS}
        for g in role_grants(Role.AUDITOR, NAMES)
    )


def test_a_refused_produce_names_the_write_grant_on_that_topic() -> None:
    error = refusal(
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), Role.TICKER, NAMES, "prod.runs"
    )

    assert isinstance(error, NotAuthorizedError)
    assert [g.describe() for g in error.needed] == ["WRITE on topic prod.runs"]
    assert "(TOPIC_AUTHORIZATION_FAILED on topic prod.runs)" in str(error)
    assert "kairos acls ticker" in str(error)


def test_a_refused_group_names_the_roles_group_grants() -> None:
    error = refusal(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), Role.EXECUTOR, NAMES)

    assert isinstance(error, NotAuthorizedError)
    assert [(g.resource, g.name) for g in error.needed] == [(Resource.GROUP, "prod.executors")]


def test_refused_credentials_say_which_settings_to_check() -> None:
    error = refusal(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED), Role.TICKER, NAMES)

    assert isinstance(error, NotAuthenticatedError)
    assert "sasl.username" in str(error)


def test_other_errors_are_not_refusals() -> None:
    assert refusal(KafkaError(KafkaError._TRANSPORT), Role.TICKER, NAMES) is None


def test_operations_md_lists_exactly_the_acls_the_code_grants() -> None:
    """The doc's table is the code's list for the default prefix: neither drifts alone."""
    names = DeploymentNames.of(KafkaSettings(bootstrap_servers="127.0.0.1:9092"))
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    rows = {line for line in doc.splitlines() if line.startswith("| ") and " `kairos." in line}
    for role in Role:
        for grant in role_grants(role, names):
            prefixed = " (prefixed)" if grant.pattern is Pattern.PREFIXED else ""
            row = f"| {role} | {grant.operation} | {grant.resource} `{grant.name}`{prefixed} |"
            assert any(line.startswith(row) for line in rows), row
    listed = sum(len(role_grants(role, names)) for role in Role)
    assert len([line for line in rows if line.split(" | ")[0][2:] in set(Role)]) == listed
