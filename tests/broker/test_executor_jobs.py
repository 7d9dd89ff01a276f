"""Executor processes running each job kind: retries, dead letters, timeouts, bad records, SIGTERM.

Real broker, real executor processes, the embedded SQLite store; the tests publish RunRequested
records themselves, as a ticker would.
"""

from __future__ import annotations

import http.server
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import ServiceProcess

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


@pytest.fixture
def executor(launch_executor: Launcher, tmp_path: Path) -> Iterator[ServiceProcess]:
    # The runs have no owner; their http and kafka jobs reach a server on 127.0.0.1 and write
    # reminders-* topics, which such runs may only when the runtime policy's default allows it.
    policy = tmp_path / "runtime-policy.yaml"
    policy.write_text("default: {http_allow: [127.0.0.1], kafka_topics: ['reminders-*']}\n")
    process = launch_executor("e1", env={"KAIROS_RUNTIME_POLICY": str(policy)})
    yield process
    assert process.stop() == 0, process.log()[-3000:]


def wait_for_steps(
    runs_topic: RunsTopic, run_id: str, last: str, timeout_s: float = 60
) -> list[tuple[str, int]]:
    def ended() -> list[tuple[str, int]]:
        steps = runs_topic.steps(run_id)
        assert steps and steps[-1][0] == last, f"{run_id}: {steps}"
        return steps

    return eventually(ended, timeout_s=timeout_s, interval_s=0.5, message=f"{run_id} not {last}")


def fails_until_the_third_attempt(seen: Path) -> dict[str, Any]:
    """A shell job that appends its run id, schedule id and attempt to `seen`, and fails
    (exit 7, printing `not yet`) before its third attempt."""
    return {
        "kind": "shell",
        "command": f'echo "$KAIROS_RUN_ID $KAIROS_SCHEDULE_ID $KAIROS_ATTEMPT" >> {seen}; '
        '[ "$KAIROS_ATTEMPT" -ge 3 ] || { echo "not yet"; exit 7; }',
    }


def assert_retried_with_backoff_until_it_succeeded(
    runs_topic: RunsTopic, run: dict[str, Any], seen: Path
) -> None:
    """The run of `fails_until_the_third_attempt`: three attempts, each seeing its own number,
    200 ms then 400 ms apart, all reported by e1 with the run's nominal and fire instants."""
    assert wait_for_steps(runs_topic, run["run_id"], "succeeded") == [
        ("started", 1),
        ("failed", 1),
        ("retrying", 1),
        ("started", 2),
        ("failed", 2),
        ("retrying", 2),
        ("started", 3),
        ("succeeded", 3),
    ]
    assert seen.read_text().splitlines() == [
        f"flaky@2027-03-14T07:00:00Z flaky {n}" for n in (1, 2, 3)
    ]
    events = [e for e in runs_topic.events() if e["run_id"] == run["run_id"]]
    failed = [e for e in events if e["kind"] == "failed"]
    retrying = [e for e in events if e["kind"] == "retrying"]
    assert failed[0]["reason"] == "exit status 7; output: not yet"
    # Exponential backoff from the run's retry_backoff_ms (200 ms): 200 ms, then 400 ms.
    assert [
        r["next_attempt_at"] - f["finished_at"] for r, f in zip(retrying, failed, strict=True)
    ] == [timedelta(milliseconds=200), timedelta(milliseconds=400)]
    for event in events:
        assert (event["nominal_at"], event["fired_at"].replace(microsecond=0)) == (
            NOMINAL,
            run["fired_at"].replace(microsecond=0),
        )
        assert event["executor_instance"] == "e1"


def failure_reason(runs_topic: RunsTopic, run: dict[str, Any]) -> str:
    """The reason of the run's first `failed` event."""
    reason: str = next(
        e["reason"]
        for e in runs_topic.events()
        if e["run_id"] == run["run_id"] and e["kind"] == "failed"
    )
    return reason


def assert_dead_lettered_as_exhausted(
    runs_topic: RunsTopic, run: dict[str, Any], reason: str
) -> None:
    """The run's record, as consumed, is in e1's dead letters with why its attempts ran out."""
    letters = {d["key"]: d for d in runs_topic.dead_letters()}
    dead = letters[run["run_id"].encode()]
    assert dead["value"] == make_codecs().run_requested.encode(run)
    assert dead["source_topic"] == runs_topic.runs
    assert dead["error_class"] == "RunAttemptsExhaustedError"
    assert dead["reason"] == reason
    assert dead["dead_lettered_by"] == "executor:e1"


def test_failing_shell_jobs_are_retried_with_backoff_then_dead_lettered(
    runs_topic: RunsTopic, executor: ServiceProcess, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    third_time_lucky = runs_topic.request("flaky", NOMINAL, fails_until_the_third_attempt(seen))
    hopeless = runs_topic.request(
        "broken", NOMINAL, {"kind": "shell", "command": "exit 3"}, max_attempts=2
    )
    too_slow = runs_topic.request(
        "slow", NOMINAL, {"kind": "shell", "command": "sleep 30"}, max_attempts=1, timeout_ms=500
    )
    runs_topic.publish(third_time_lucky, hopeless, too_slow)

    assert_retried_with_backoff_until_it_succeeded(runs_topic, third_time_lucky, seen)
    assert wait_for_steps(runs_topic, hopeless["run_id"], "dead_lettered") == [
        ("started", 1),
        ("failed", 1),
        ("retrying", 1),
        ("started", 2),
        ("failed", 2),
        ("dead_lettered", 2),
    ]
    assert wait_for_steps(runs_topic, too_slow["run_id"], "dead_lettered") == [
        ("started", 1),
        ("failed", 1),
        ("dead_lettered", 1),
    ]
    assert failure_reason(runs_topic, too_slow) == "timed out after 0.5s"
    assert_dead_lettered_as_exhausted(
        runs_topic, hopeless, "2 of 2 attempts failed; the last: exit status 3"
    )


def test_bad_records_are_dead_lettered_and_the_executor_keeps_going(
    runs_topic: RunsTopic, executor: ServiceProcess
) -> None:
    unknown_kind = runs_topic.request("odd", NOMINAL, {"kind": "spark", "jar": "x.jar"})
    no_command = runs_topic.request("empty", NOMINAL, {"kind": "shell"})
    mislabelled = runs_topic.request("mislabelled", NOMINAL, {"kind": "noop"})
    fine = runs_topic.request("fine", NOMINAL, {"kind": "noop"})
    # Valid, for a team's executor with this handler: passed over here, never dead-lettered.
    elsewhere = runs_topic.request("team", NOMINAL, {"kind": "python", "handler": "settle"})
    runs_topic.publish_raw([(b"garbage", b"\x00not avro at all"), (b"tombstone", None)])
    runs_topic.publish(unknown_kind, no_command)
    runs_topic.publish_raw([(b"another-run-id", make_codecs().run_requested.encode(mislabelled))])
    runs_topic.publish(elsewhere, fine)

    assert wait_for_steps(runs_topic, fine["run_id"], "succeeded") == [
        ("started", 1),
        ("succeeded", 1),
    ]
    letters = eventually(
        lambda: len(runs_topic.dead_letters()) == 5 and runs_topic.dead_letters(),
        timeout_s=30,
        message="five dead letters",
    )
    by_key = {d["key"]: (d["error_class"], d["reason"]) for d in letters}
    assert by_key[b"garbage"][0] == "CorruptRecordError"
    assert "expected the single-object marker" in by_key[b"garbage"][1]
    assert by_key[b"tombstone"] == (
        "RunRequestInvalidError",
        "run (no run id): a tombstone is not a RunRequested",
    )
    assert by_key[unknown_kind["run_id"].encode()][0] == "JobParamsError"
    assert (
        "job kind 'spark': unknown kind 'spark'; executors run"
        in by_key[unknown_kind["run_id"].encode()][1]
    )
    assert by_key[no_command["run_id"].encode()] == (
        "JobParamsError",
        "job kind 'shell': command: is required for a shell job; add command: 'echo hi'",
    )
    assert by_key[b"another-run-id"][0] == "RunRequestInvalidError"
    # Nothing that was dead-lettered was claimed or run.
    assert {e["run_id"] for e in runs_topic.events()} == {fine["run_id"]}


class _FlakyService(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first request and 201 to the next; records every request."""

    requests: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        status = 503 if len(self.requests) == 1 else 201
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"try again later" if status == 503 else b"ok")

    def log_message(self, *_: Any) -> None:
        """Quiet: the test reads the recorded requests instead."""


@pytest.fixture
def flaky_service() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_FlakyService,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", requests
    server.shutdown()


def test_http_jobs_carry_the_run_id_as_idempotency_key_on_every_attempt(
    runs_topic: RunsTopic,
    executor: ServiceProcess,
    flaky_service: tuple[str, list[dict[str, Any]]],
) -> None:
    url, requests = flaky_service
    run = runs_topic.request(
        "invoice", NOMINAL, {"kind": "http", "url": f"{url}/invoices", "body": {"month": "2027-03"}}
    )
    runs_topic.publish(run)
    assert wait_for_steps(runs_topic, run["run_id"], "succeeded") == [
        ("started", 1),
        ("failed", 1),
        ("retrying", 1),
        ("started", 2),
        ("succeeded", 2),
    ]
    assert [r["headers"]["Idempotency-Key"] for r in requests] == [run["run_id"]] * 2
    assert [r["headers"]["X-Kairos-Attempt"] for r in requests] == ["1", "2"]
    assert requests[0]["body"] == b'{"month": "2027-03"}'
    failed = next(e for e in runs_topic.events() if e["kind"] == "failed")
    assert failed["reason"] == "HTTP 503: try again later"


def test_kafka_jobs_deliver_their_payload_keyed_by_run_id(
    runs_topic: RunsTopic, executor: ServiceProcess, create_topic: Callable[..., str]
) -> None:
    target = create_topic("reminders")
    run = runs_topic.request(
        "reminder", NOMINAL, {"kind": "kafka", "topic": target, "payload": {"text": "pay the rent"}}
    )
    runs_topic.publish(run)
    wait_for_steps(runs_topic, run["run_id"], "succeeded")
    delivered = read_topic(runs_topic.settings.bootstrap_servers, target)
    assert delivered == [(run["run_id"], b'{"text": "pay the rent"}')]


def test_sigterm_lets_attempts_finish_within_the_grace_period_then_stops_the_rest(
    runs_topic: RunsTopic, launch_executor: Launcher, tmp_path: Path
) -> None:
    process = launch_executor("e1", shutdown_grace="5s")
    done = tmp_path / "done"
    quick = runs_topic.request(
        "nightly", NOMINAL, {"kind": "shell", "command": f"sleep 3; touch {done}"}
    )
    endless = runs_topic.request("endless", NOMINAL, {"kind": "shell", "command": "sleep 600"})
    runs_topic.publish(quick, endless)
    eventually(
        lambda: all(("started", 1) in runs_topic.steps(r["run_id"]) for r in (quick, endless)),
        timeout_s=60,
        interval_s=0.2,
        message="the attempts did not start",
    )
    process.signal(signal.SIGTERM)
    signalled_at, signalled = datetime.now(UTC), time.monotonic()
    assert process.stop(timeout_s=30) == 0, process.log()[-3000:]
    assert time.monotonic() - signalled < 12, "the grace period was not enforced"
    assert done.exists(), "an attempt within the grace period was cut short"
    assert runs_topic.steps(quick["run_id"]) == [("started", 1), ("succeeded", 1)]
    succeeded = next(
        e
        for e in runs_topic.events()
        if e["run_id"] == quick["run_id"] and e["kind"] == "succeeded"
    )
    assert succeeded["finished_at"] > signalled_at, "it was still running at SIGTERM"
    # Stopped at the end of the grace period: a failed attempt, retried by whoever runs next.
    assert runs_topic.steps(endless["run_id"]) == [("started", 1), ("failed", 1), ("retrying", 1)]
    failed = next(
        e for e in runs_topic.events() if e["run_id"] == endless["run_id"] and e["kind"] == "failed"
    )
    assert failed["reason"] == (
        "the executor is shutting down and its grace period ended; stopped before it ended"
    )
