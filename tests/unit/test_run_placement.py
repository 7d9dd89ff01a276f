"""Runs go where they may run: pools, teams bound to an executor, handlers registered for teams.

Admission (`read_request`) decides it from the decoded `RunRequested`, before anything is
claimed: a run of a pool or team this executor does not serve is passed over (for the executors
that serve it), a run naming a handler registered here for other teams is dead-lettered with the
reason and never run.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest
import typer
from fastavro import schemaless_writer
from prometheus_client import CollectorRegistry, Counter

from kairos.cli.executor import _served_kinds
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule, SchedulesInvalidError, parse_schedule
from kairos.services.executor.admission import (
    Admissible,
    PassedOver,
    Rejected,
    ServedJobs,
    read_request,
)
from kairos.services.executor.fleet import advertised_client_id
from kairos.services.executor.handlers import (
    ANY_TEAM,
    HandlerRegistrationError,
    Handlers,
    RunContext,
)
from kairos.services.executor.pool_watch import PoolWatch, advertised_pools, pools_tagged
from kairos.streams.dedupe.base import RunRequest, SourceRecord
from kairos.streams.wire.avro_schemas import RecordType, load_catalog
from kairos.streams.wire.codec import SINGLE_OBJECT_MARKER, make_codecs
from kairos.streams.wire.records import (
    definition_record,
    run_requested_record,
    schedule_from_definition,
)

pytestmark = pytest.mark.unit

CODEC = make_codecs().run_requested
NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
SOURCE = SourceRecord("kairos.runs", 0, 0)


def _noop(run: RunContext) -> None:
    return None


def _handlers() -> Handlers:
    handlers = Handlers()
    handlers.add("issue-refund", _noop, teams=("payments",))
    handlers.add("legacy-report", _noop)
    handlers.add("ping", _noop, teams=ANY_TEAM)
    return handlers


HANDLERS = _handlers()
EVERYTHING = ServedJobs(frozenset({"noop", "shell", "python"}), HANDLERS)


def a_run(
    *, owner: str | None = None, pool: str | None = None, handler: str | None = None
) -> dict[str, Any]:
    """A `RunRequested` as a ticker fires it; without `pool`, as one written before pools."""
    job = (
        {"kind": "noop", "params_json": "{}"}
        if handler is None
        else {"kind": "python", "params_json": f'{{"handler": "{handler}"}}'}
    )
    record: dict[str, Any] = {
        "run_id": run_id("nightly", NOMINAL),
        "schedule_id": "nightly",
        "nominal_at": NOMINAL,
        "due_at": NOMINAL,
        "fired_at": NOMINAL,
        "lateness_ms": 0,
        "job": job,
        "attempt": 1,
        "max_attempts": 1,
        "timeout_ms": 60_000,
        "retry_backoff_ms": 1_000,
        "overlap": "allow",
        "schedules_partition": 0,
        "schedule_offset": 0,
        "ticker_instance": "t1",
        "owner": owner,
    }
    if pool is not None:
        record["pool"] = pool
    return record


def admit(record: dict[str, Any], served: ServedJobs = EVERYTHING) -> Admissible:
    return read_request(record["run_id"].encode(), CODEC.encode(record), SOURCE, CODEC, served)


def test_a_run_of_another_pool_is_passed_over_and_reported_to_the_watch() -> None:
    told: list[str] = []
    served = ServedJobs(EVERYTHING.kinds, HANDLERS, passed_over_pool=told.append)

    assert isinstance(admit(a_run(pool="gpu"), served), PassedOver)
    assert told == ["gpu"]
    assert isinstance(admit(a_run(pool="default"), served), RunRequest)
    assert told == ["gpu"]


def test_an_executor_of_the_gpu_pool_takes_gpu_runs_only() -> None:
    gpu = ServedJobs(EVERYTHING.kinds, HANDLERS, pools=frozenset({"gpu"}))

    assert isinstance(admit(a_run(pool="gpu"), gpu), RunRequest)
    assert isinstance(admit(a_run(pool="default"), gpu), PassedOver)
    assert isinstance(admit(a_run(), gpu), PassedOver)


def test_a_run_written_before_pools_existed_reads_as_the_default_pool() -> None:
    released = load_catalog().history["v8"][RecordType.RUN_REQUESTED]
    body = io.BytesIO()
    schemaless_writer(body, released.parsed, {**a_run(), "labels": {}, "rerun_request_id": None})
    old = SINGLE_OBJECT_MARKER + released.fingerprint + body.getvalue()

    assert CODEC.decode(old)["pool"] == "default"
    verdict = read_request(a_run()["run_id"].encode(), old, SOURCE, CODEC, EVERYTHING)
    assert isinstance(verdict, RunRequest)


def test_an_executor_bound_to_teams_passes_over_every_other_run() -> None:
    payments = ServedJobs(EVERYTHING.kinds, HANDLERS, teams=frozenset({"payments"}))

    assert isinstance(admit(a_run(owner="payments"), payments), RunRequest)
    assert isinstance(admit(a_run(owner="growth"), payments), PassedOver)
    assert isinstance(admit(a_run(owner=None), payments), PassedOver)
    # Passed over, not dead-lettered: growth's own executors may have a handler of that name.
    assert isinstance(admit(a_run(owner="growth", handler="issue-refund"), payments), PassedOver)


def test_another_teams_run_naming_a_handler_is_dead_lettered_with_the_reason() -> None:
    verdict = admit(a_run(owner="growth", handler="issue-refund"))

    assert isinstance(verdict, Rejected)
    assert verdict.error_class == "HandlerNotPermittedError"
    assert (
        "handler issue-refund is registered for teams payments; team growth may not call it"
        in verdict.reason
    )
    assert "teams=('growth', 'payments') or teams=ANY_TEAM" in verdict.reason


def test_the_owning_teams_run_reaches_its_handler() -> None:
    assert isinstance(admit(a_run(owner="payments", handler="issue-refund")), RunRequest)


def test_a_run_without_an_owner_may_not_call_a_teams_handler() -> None:
    verdict = admit(a_run(owner=None, handler="issue-refund"))

    assert isinstance(verdict, Rejected)
    assert "a run without an owner may not call it: set the schedule's owner" in verdict.reason


def test_a_handler_registered_without_teams_serves_only_runs_without_an_owner() -> None:
    assert isinstance(admit(a_run(owner=None, handler="legacy-report")), RunRequest)
    verdict = admit(a_run(owner="growth", handler="legacy-report"))

    assert isinstance(verdict, Rejected)
    assert "registered for runs without an owner only; team growth may not call it" in (
        verdict.reason
    )


def test_a_handler_registered_for_any_team_serves_every_run() -> None:
    for owner in (None, "growth", "payments"):
        assert isinstance(admit(a_run(owner=owner, handler="ping")), RunRequest)


def test_a_handler_this_executor_lacks_is_passed_over_not_dead_lettered() -> None:
    assert isinstance(admit(a_run(owner="growth", handler="send-newsletter")), PassedOver)


@pytest.mark.parametrize(
    ("teams", "problem"),
    [
        ("payments", "teams='payments' is one string; write teams=('payments',)"),
        (("Payments",), "are not team names"),
    ],
)
def test_handler_teams_are_checked_when_registered(teams: Any, problem: str) -> None:
    with pytest.raises(
        HandlerRegistrationError, match=problem.replace("(", r"\(").replace(")", r"\)")
    ):
        Handlers().add("issue-refund", _noop, teams=teams)


def test_combined_registries_keep_each_handlers_teams() -> None:
    merged = Handlers.combined([HANDLERS])

    assert merged.refusal("issue-refund", "payments") is None
    assert merged.refusal("issue-refund", "growth") is not None
    assert merged.refusal("ping", "growth") is None


def test_the_run_context_carries_the_owner() -> None:
    assert "owner" in RunContext.__dataclass_fields__


def test_a_schedule_names_its_pool_and_its_runs_carry_it() -> None:
    gpu = Schedule(id="train", cron="0 2 * * *", pool="gpu")
    plain = Schedule(id="report", cron="0 2 * * *")

    assert schedule_from_definition(definition_record(gpu)).pool == "gpu"
    assert definition_record(plain)["pool"] is None
    for schedule, pool in ((gpu, "gpu"), (plain, "default")):
        state = ScheduleState(schedule, 5, NOMINAL)
        decision = Decision(
            run_id(schedule.id, NOMINAL), schedule.id, NOMINAL, NOMINAL, Action.FIRE
        )
        record = run_requested_record(
            decision, state, fired_at=NOMINAL, partition=0, ticker_instance="t1"
        )
        assert CODEC.decode(CODEC.encode(record))["pool"] == pool


def test_a_bad_pool_is_refused_with_the_rule() -> None:
    with pytest.raises(SchedulesInvalidError, match="field 'pool': 'GPU!' is not a pool name"):
        parse_schedule({"id": "train", "cron": "0 2 * * *", "pool": "GPU!"})


def test_an_executor_advertises_its_pools_beside_its_store() -> None:
    client_id = advertised_client_id(pools_tagged("exec-1", {"gpu", "default"}), "abc123")

    assert advertised_pools(client_id) == frozenset({"gpu", "default"})
    assert advertised_pools(advertised_client_id("exec-1", "abc123")) is None


def _unserved(counter: Counter, pool: str) -> float:
    value = counter.labels(pool)._value.get()
    assert isinstance(value, float)
    return value


def test_runs_of_a_pool_no_live_executor_advertises_are_counted() -> None:
    surveys: list[frozenset[str] | None] = [frozenset({"default"}), frozenset({"default", "gpu"})]
    clock = [0.0]
    counter = Counter("unserved", "test", ["pool"], registry=CollectorRegistry())
    watch = PoolWatch(
        lambda: surveys.pop(0), counter, clock=lambda: clock[0], spawn=lambda survey: survey()
    )

    watch.passed_over("gpu")
    watch.passed_over("gpu")
    watch.passed_over("default")
    assert _unserved(counter, "gpu") == 2
    assert _unserved(counter, "default") == 0
    clock[0] = 31.0  # stale: surveyed again, and now a gpu executor is there
    watch.passed_over("gpu")
    watch.passed_over("gpu")
    assert _unserved(counter, "gpu") == 2


def test_an_unknown_fleet_counts_nothing() -> None:
    counter = Counter("unserved", "test", ["pool"], registry=CollectorRegistry())
    watch = PoolWatch(lambda: None, counter, spawn=lambda survey: survey())

    for _ in range(3):
        watch.passed_over("gpu")
    assert _unserved(counter, "gpu") == 0


def _kinds(capsys: pytest.CaptureFixture[str], kinds: str | None, **how: Any) -> str:
    """The kinds `kairos executor` serves, or the error it refuses to start with."""
    try:
        return ",".join(sorted(_served_kinds(kinds, how.pop("registry", Handlers()), **how)))
    except typer.Exit:
        return "refused: " + capsys.readouterr().err


@pytest.mark.parametrize(
    ("kinds", "how", "expected"),
    [
        (None, {"own_group": False}, "http,kafka,noop,shell"),
        (None, {"own_group": False, "registry": HANDLERS}, "http,kafka,noop,python,shell"),
        (None, {"own_group": True, "registry": HANDLERS}, "python"),
        ("shell", {"own_group": True, "pools": frozenset({"gpu"})}, "shell"),
        (None, {"own_group": True}, "refused: error: give --kinds explicitly: a second group"),
        (None, {"own_group": True, "teams": True}, "refused: error: give --kinds explicitly"),
        ("shell", {"own_group": False, "pools": frozenset({"gpu"})}, "refused: error: --pool"),
        ("noop", {"own_group": False, "teams": True}, "refused: error: --pool and --teams need"),
    ],
)
def test_an_executor_serves_only_what_it_was_asked_for(
    capsys: pytest.CaptureFixture[str], kinds: str | None, how: dict[str, Any], expected: str
) -> None:
    how = {"pools": frozenset({"default"}), "teams": False, **how}

    assert _kinds(capsys, kinds, **how).startswith(expected)
