"""At-least-once delivery, effectively-once outcome: duplicates suppressed, effects applied once.

On SQLite and on PostgreSQL, with real executor processes killed by real signals. The `python`
handler below is a team's own code: `kairos executor --handlers
tests.broker.test_executor_dedupe:handlers` imports it in the executor process.
"""

from __future__ import annotations

import http.server
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kairos.services.executor import Handlers, RunContext
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from tests.helpers import eventually
from tests.postgres import run_sql

if TYPE_CHECKING:
    from tests.broker.conftest import Launcher, RunsTopic

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
HANDLERS = "tests.broker.test_executor_dedupe:handlers"

handlers = Handlers()


@handlers.handler("record-payment")
def record_payment(run: RunContext) -> None:
    """Writes the payment in the dedupe store's transaction: it commits with the outcome."""
    db = run.transaction()
    mark = "?" if db.dialect == "sqlite" else "%s"
    db.execute(
        f"INSERT INTO payments (run_id, attempt) VALUES ({mark}, {mark})", (run.run_id, run.attempt)
    )
    hang_marker = run.args.get("hang_first_attempt")
    if run.attempt == 1 and hang_marker:
        # Written, not yet committed: the test kills the executor here.
        Path(hang_marker).touch()
        run.stop_requested.wait(60)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store every executor of the test shares, with the team's `payments` table."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "shared" / "dedupe.sqlite3")
        open_dedupe_store(url).close()  # creates the file and its directory
    else:
        url = request.getfixturevalue("postgres_url")
    run_sql(url, "CREATE TABLE payments (run_id TEXT NOT NULL, attempt INTEGER NOT NULL)")
    return url


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def duplicates_suppressed(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError as error:
        raise AssertionError(f"no metrics on port {port} yet: {error}") from error
    match = re.search(r"^kairos_executor_duplicates_suppressed_total (\S+)$", text, re.MULTILINE)
    assert match is not None, "the metric is not exported"
    return float(match.group(1))


def wait_for_last_step(runs_topic: RunsTopic, run_id: str, kind: str) -> list[tuple[str, int]]:
    def ended() -> list[tuple[str, int]]:
        steps = runs_topic.steps(run_id)
        assert steps and steps[-1][0] == kind, f"{run_id}: {steps}"
        return steps

    return eventually(ended, timeout_s=60, interval_s=0.5, message=f"{run_id} never {kind}")


def without_republished(steps: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The steps with an event seen twice in a row counted once: run events are published at
    least once (docs/executors.md), and e1, killed after the broker took its `started` and
    before it deleted it from the outbox, leaves it for e2 to publish again (seen in CI under
    load: ('started', 1) twice)."""
    return [step for index, step in enumerate(steps) if index == 0 or steps[index - 1] != step]


def test_redelivered_and_republished_runs_take_effect_once_and_count_as_duplicates(
    runs_topic: RunsTopic, launch_executor: Launcher, store_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    payment = runs_topic.request(
        "payments", NOMINAL, {"kind": "python", "handler": "record-payment"}
    )
    entry = runs_topic.request(
        "ledger", NOMINAL, {"kind": "shell", "command": f"echo $KAIROS_RUN_ID >> {ledger}"}
    )
    first_metrics = free_port()
    # Offsets are never committed by the first executor: whatever it ran, it is redelivered.
    first = launch_executor(
        "e1",
        dedupe_url=store_url,
        handlers=HANDLERS,
        offset_commit_interval="1h",
        metrics_port=first_metrics,
    )
    for _ in range(3):  # the ticker, a replay, an operator: the same run id three times
        runs_topic.publish(payment, entry)
    for run in (payment, entry):
        wait_for_last_step(runs_topic, run["run_id"], "succeeded")
    eventually(
        lambda: duplicates_suppressed(first_metrics) == 4,
        timeout_s=30,
        message="the re-published copies were not counted",
    )
    first.kill()

    second_metrics = free_port()
    second = launch_executor(
        "e2",
        dedupe_url=store_url,
        handlers=HANDLERS,
        metrics_port=second_metrics,
    )
    try:
        eventually(
            lambda: duplicates_suppressed(second_metrics) == 6,
            timeout_s=60,
            message="the uncommitted records were not redelivered and suppressed",
        )
    finally:
        assert second.stop() == 0, second.log()[-3000:]

    assert run_sql(store_url, "SELECT run_id, attempt FROM payments") == [(payment["run_id"], 1)]
    assert ledger.read_text().splitlines() == [entry["run_id"]]
    for run in (payment, entry):
        assert runs_topic.steps(run["run_id"]) == [("started", 1), ("succeeded", 1)]
    store = open_dedupe_store(store_url)
    try:
        for run in (payment, entry):
            stored = store.get(run["run_id"])
            assert stored is not None and stored.deliveries == 6
    finally:
        store.close()


class _IdempotentService(http.server.BaseHTTPRequestHandler):
    """Applies a request's effect once per Idempotency-Key; the very first request hangs (the
    test kills its executor meanwhile)."""

    requests: list[str]
    effects: dict[str, int]
    release: threading.Event

    def do_POST(self) -> None:
        key = self.headers["Idempotency-Key"]
        self.requests.append(key)
        if key not in self.effects:
            self.effects[key] = 1
        if len(self.requests) == 1:
            self.release.wait(60)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        """Quiet: the test reads the recorded requests instead."""


@pytest.fixture
def idempotent_service() -> Iterator[tuple[str, type[_IdempotentService]]]:
    handler = type(
        "Handler",
        (_IdempotentService,),
        {"requests": [], "effects": {}, "release": threading.Event()},
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/transfers", handler
    handler.release.set()
    server.shutdown()


def _loopback_allowed(tmp_path: Path) -> dict[str, str]:
    """An executor environment whose runs without an owner may reach services on 127.0.0.1."""
    policy = tmp_path / "runtime-policy.yaml"
    policy.write_text("default: {http_allow: [127.0.0.1]}\n")
    return {"KAIROS_RUNTIME_POLICY": str(policy)}


def test_runs_cut_short_by_sigkill_are_retried_elsewhere_and_take_effect_once(
    runs_topic: RunsTopic,
    launch_executor: Launcher,
    store_url: str,
    tmp_path: Path,
    idempotent_service: tuple[str, type[_IdempotentService]],
) -> None:
    url, service = idempotent_service
    hanging = tmp_path / "hanging"
    hang = {"hang_first_attempt": str(hanging)}
    payment = runs_topic.request(
        "payments", NOMINAL, {"kind": "python", "handler": "record-payment", "args": hang}
    )
    transfer = runs_topic.request("transfers", NOMINAL, {"kind": "http", "url": url})
    allowed = _loopback_allowed(tmp_path)
    first = launch_executor(
        "e1",
        dedupe_url=store_url,
        handlers=HANDLERS,
        env=allowed,
    )
    runs_topic.publish(payment, transfer)
    eventually(
        lambda: hanging.exists() and service.requests,
        timeout_s=60,
        message="the first attempts did not start",
    )
    first.kill()  # mid-attempt: the payment is written but not committed, the transfer applied

    second = launch_executor(
        "e2",
        dedupe_url=store_url,
        handlers=HANDLERS,
        env=allowed,
    )
    try:
        for run in (payment, transfer):
            steps = wait_for_last_step(runs_topic, run["run_id"], "succeeded")
            assert without_republished(steps) == [
                ("started", 1),
                ("failed", 1),
                ("retrying", 1),
                ("started", 2),
                ("succeeded", 2),
            ]
    finally:
        assert second.stop() == 0, second.log()[-3000:]
    failed = [e for e in runs_topic.events() if e["kind"] == "failed"]
    assert {e["reason"] for e in failed} == {
        "lease expired: executor e1 stopped renewing it during attempt 1"
    }
    assert {e["executor_instance"] for e in failed} == {"e2"}
    # The transactional write of the killed attempt was rolled back with it: one payment.
    assert run_sql(store_url, "SELECT run_id, attempt FROM payments") == [(payment["run_id"], 2)]
    # The service saw the transfer twice with one key, and applied it once.
    assert service.requests == [transfer["run_id"]] * 2
    assert service.effects == {transfer["run_id"]: 1}
