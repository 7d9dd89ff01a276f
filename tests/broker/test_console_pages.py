"""The console as a person uses it: real headless Chromium against a real broker, ticker,
executor and console process. Each check is what the page shows: texts, links, plots."""

from __future__ import annotations

import base64
import json
import re
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from kairos.cli.console import console_arguments
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from tests.browser import chromium, click_and_load
from tests.helpers import eventually
from tests.processes import ServiceProcess, start_executor, start_ticker

SERVING = re.compile(r"console serving on (http://\S+)")


TOKEN = "a-token-of-the-right-length"


def start_console(
    settings: KafkaSettings,
    state_dir: Path,
    log_dir: Path,
    users_file: Path | None = None,
    *flags: tuple[str, str | Path | None],
) -> ServiceProcess:
    arguments = console_arguments(settings, state_dir, "127.0.0.1:0", users_file, *flags)
    return ServiceProcess(arguments, log_dir / "console.log")


def sign_in(browser: WebDriver, base: str, name: str, token: str) -> None:
    """Through the login form, as a person does: the session is a cookie, the token is not kept."""
    browser.get(base + "/login")
    form = browser.find_element(By.ID, "login-form")
    form.find_element(By.NAME, "name").send_keys(name)
    form.find_element(By.NAME, "token").send_keys(token)
    click_and_load(browser, form.find_element(By.ID, "sign-in-button"))
    assert browser.find_element(By.ID, "who").text.startswith(name), browser.page_source[:2000]


def post(
    base: str, path: str, headers: dict[str, str] | None = None, body: dict[str, str] | None = None
) -> tuple[int, Any]:
    """An API post, as a script sends it (with the header no page elsewhere can send)."""
    data = json.dumps(body or {"reason": "test"}).encode()
    sent = {"X-Kairos-Client": "test", "Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(base + path, data=data, headers=sent, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def address_of(console: ServiceProcess, after: int = 0) -> str:
    """The address the console logged (after the `after`-th start, when it was restarted)."""
    console.wait_for_log("console serving on")

    def address() -> str:
        found = SERVING.findall(console.log())
        return str(found[after]) if len(found) > after else ""

    return eventually(address, message="no address")


def api(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        return json.load(response)


def succeeded_runs(base: str, schedule_id: str) -> list[dict[str, Any]]:
    try:
        runs = api(base, f"/api/v1/schedules/{schedule_id}")["last_runs"]
    except urllib.error.HTTPError as error:
        assert error.code == 404, error
        return []  # not in the view yet
    return [run for run in runs if run["status"] == "succeeded"]


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    yield driver
    driver.quit()


def schedules(now: datetime) -> list[Schedule]:
    job = {"kind": "shell", "command": "echo ok"}
    return [
        Schedule.model_validate(s)
        for s in [
            {"id": "billing.every-minute", "cron": "* * * * *", "owner": "billing",
             "labels": {"tier": "gold", "note": "<b>bold</b>"}, "job": job},
            {"id": "billing.nightly", "cron": "0 3 * * *", "owner": "billing", "job": job},
            # Its next fires cross New York's spring-forward: 02:30 does not exist on 14 March.
            {"id": "ops.new-york-0230", "cron": "30 2 * * *", "timezone": "America/New_York",
             "start_at": "2027-03-12T00:00:00Z", "owner": "ops", "job": job},
            {"id": "ops.paused", "cron": "*/5 * * * *", "owner": "ops", "paused": True,
             "job": job},
        ]
    ]  # fmt: skip


def test_a_person_reads_schedules_runs_partitions_activity_and_an_audit(
    kafka_settings: KafkaSettings, tmp_path: Path, browser: WebDriver
) -> None:
    now = datetime.now(UTC)
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert_all(schedules(now), reason="first version")
        client.pause("billing.nightly", reason="quarter close")
    # Not an event at all: the ticker dead-letters it, the console skips and counts it.
    garbage = Producer(kafka_settings.producer_config())
    garbage.produce(kafka_settings.layout.name(TopicRole.SCHEDULES), b"not avro", b"bad.record")
    assert garbage.flush(30) == 0
    processes = [
        start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path),
        start_executor(kafka_settings, "e1", tmp_path / "e1", tmp_path),
    ]
    console = start_console(kafka_settings, tmp_path / "console", tmp_path)
    processes.append(console)
    try:
        base = address_of(console)
        first_run = eventually(
            lambda: succeeded_runs(base, "billing.every-minute"),
            timeout_s=120,
            message="no run of billing.every-minute succeeded in the console's view",
        )[0]
        _the_schedules_list(browser, base)
        _the_schedule_page(browser, base, first_run["nominal_at"])
        _the_partitions_page(browser, base)
        _the_activity_page(browser, base)
        _a_bad_record(browser, base)
        _read_only_by_default(browser, base)
        fires_before = _fires_in_minute(base, first_run["fired_at"])
        console.signal(signal.SIGTERM)
        assert console.process.wait(timeout=30) == 0, console.log()[-3000:]
        users = tmp_path / "users"
        users.write_text(f"alice:{TOKEN}:ops,billing\n")
        users.chmod(0o600)
        console = start_console(kafka_settings, tmp_path / "console", tmp_path, users)
        processes.append(console)
        restarted = address_of(console, after=1)
        # The view survived: what it held is there at once, and nothing was applied twice.
        assert api(restarted, "/api/v1/status")["schedules"] == 4
        assert _fires_in_minute(restarted, first_run["fired_at"]) == fires_before
        _acting_as_alice(browser, restarted)
        _an_audit_window(browser, restarted, first_run["nominal_at"])
        _a_backfill_as_alice(browser, restarted, first_run["nominal_at"])
    finally:
        for process in processes:
            if process.process.poll() is None:
                assert process.stop() == 0, process.log()[-3000:]


def _the_schedules_list(browser: WebDriver, base: str) -> None:
    browser.get(base + "/schedules")
    rows = browser.find_elements(By.CSS_SELECTOR, "#schedules tr td:first-child a")
    assert [row.text for row in rows] == [
        "billing.every-minute",
        "billing.nightly",
        "ops.new-york-0230",
        "ops.paused",
    ]
    assert "4 schedules in the view" in browser.find_element(By.ID, "view-status").text
    # A label is text, never markup.
    assert "note=<b>bold</b>" in browser.find_element(By.ID, "schedules").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#schedules b")
    browser.find_element(By.NAME, "label").send_keys("tier=gold")
    click_and_load(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    shown = browser.find_elements(By.CSS_SELECTOR, "#schedules tr td:first-child a")
    assert [row.text for row in shown] == ["billing.every-minute"]
    browser.get(base + "/schedules?owner=ops&state=paused")
    shown = browser.find_elements(By.CSS_SELECTOR, "#schedules tr td:first-child a")
    assert [row.text for row in shown] == ["ops.paused"]
    browser.get(base + "/schedules?q=billing.n")
    click_and_load(browser, browser.find_element(By.LINK_TEXT, "billing.nightly"))
    assert browser.find_element(By.ID, "schedule-id").text == "billing.nightly"
    browser.get(base + "/schedules?label=gold")
    assert "is not key=value" in browser.find_element(By.ID, "problem").text


def _the_schedule_page(browser: WebDriver, base: str, nominal_at: str) -> None:

    # The group is read at most every 5 s: a page may show it as it was just before t1 joined.
    def fired_by_t1() -> bool:
        browser.get(base + "/schedules/billing.every-minute")
        return browser.find_element(By.ID, "ticker").text == "t1"

    eventually(fired_by_t1, timeout_s=30, message="the schedule page does not name its ticker")
    runs = browser.find_element(By.ID, "runs").text
    assert nominal_at in runs and "succeeded" in runs and "e1" in runs
    browser.get(base + "/schedules/ops.new-york-0230")
    fires = browser.find_element(By.ID, "next-fires").text
    assert "2027-03-14T07:00:00Z" in fires, fires
    assert "DST gap: 02:30 does not exist that day" in fires
    assert "2027-03-13T02:30:00-05:00" in fires, "the period its run is for, from the day before"
    browser.get(base + "/schedules/billing.nightly")
    changes = browser.find_element(By.ID, "changes").text
    assert "paused" in changes and "quarter close" in changes and "alice" in changes
    assert '+  "paused": true' in changes, changes
    browser.get(base + "/schedules/no.such-schedule")
    assert "No schedule 'no.such-schedule'" in browser.find_element(By.ID, "problem").text


def _the_partitions_page(browser: WebDriver, base: str) -> None:
    def owned() -> bool:
        browser.get(base + "/partitions")
        return "stable" in browser.find_element(By.ID, "group").text

    eventually(owned, timeout_s=30, message="the group is not shown stable")
    table = browser.find_element(By.ID, "partitions")
    owners = [row.text for row in table.find_elements(By.CSS_SELECTOR, "tr td:nth-child(2)")]
    assert owners == ["t1"] * 4
    assert "t1 on" in browser.find_element(By.ID, "members").text


def _the_activity_page(browser: WebDriver, base: str) -> None:
    browser.get(base + "/activity?hours=1")
    summary = browser.find_element(By.ID, "activity-summary").text
    assert re.search(r"[1-9][0-9]* fires from", summary), summary
    plots = browser.find_elements(By.CSS_SELECTOR, "#plots svg.plot")
    assert len(plots) == 3
    bars = plots[0].find_elements(By.CSS_SELECTOR, "rect[data-series='fires']")
    assert bars and all(bar.size["height"] > 0 for bar in bars)
    assert plots[1].find_elements(By.CSS_SELECTOR, "circle")

    def herd_counted() -> bool:
        browser.get(base + "/activity?hours=1")
        return "active schedules" in browser.find_element(By.ID, "herd-summary").text

    eventually(herd_counted, timeout_s=30, message="the coming herd was not counted")
    herd = browser.find_element(By.CSS_SELECTOR, "svg[aria-label='Coming fires per minute']")
    assert herd.find_elements(By.CSS_SELECTOR, "rect")


def _an_audit_window(browser: WebDriver, base: str, nominal_at: str) -> None:
    alice = {"Authorization": "Basic " + base64.b64encode(f"alice:{TOKEN}".encode()).decode()}
    status, answer = post(base, "/api/v1/audits", alice, {"from": "-30d", "to": "now"})
    assert status == 400 and "longer than 7 days" in answer["error"], answer
    browser.get(base + "/audit")
    start = datetime.fromisoformat(nominal_at)
    form = browser.find_element(By.ID, "audit-form")
    for name, value in (("from", start), ("to", start + timedelta(minutes=1))):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value.isoformat())
    click_and_load(browser, form.find_element(By.TAG_NAME, "button"))
    audit_path = urllib.parse.urlsplit(browser.current_url).path
    assert re.fullmatch(r"/audit/\d+", audit_path), audit_path

    # Waited for through the API: the page reloads itself while the audit runs, and an element
    # read across a reload is stale.
    def finished() -> str:
        state = str(api(base, "/api/v1/audits/" + audit_path.rsplit("/", 1)[1])["state"])
        return state if state in ("done", "failed") else ""

    assert eventually(finished, timeout_s=60, message="the audit did not finish") == "done"
    browser.get(base + audit_path)
    assert browser.find_element(By.ID, "audit-state").text == "done"
    assert browser.find_element(By.ID, "verdict").text == "Verdict: holds"
    totals = browser.find_element(By.ID, "totals").text
    assert totals.split("\n")[1].split()[:4] == ["1", "1", "0", "0"], totals


def _a_bad_record(browser: WebDriver, base: str) -> None:
    assert "1 invalid record(s) skipped" in browser.find_element(By.ID, "view-status").text

    def dead_lettered() -> bool:
        browser.get(base + "/dead-letters")
        return "bad.record" in browser.find_element(By.ID, "dead-letters").text

    eventually(dead_lettered, timeout_s=30, message="the ticker's dead letter is not shown")
    row = browser.find_element(By.LINK_TEXT, "bad.record").find_element(By.XPATH, "../..")
    # A reason may quote a record's values: shown only to the team its runs are fired for, and
    # a record that never became a schedule has none.
    assert "Error" in row.text and "shown to the owning team" in row.text, row.text
    assert "cannot decode" not in row.text


def _read_only_by_default(browser: WebDriver, base: str) -> None:
    status, answer = post(base, "/api/v1/schedules/ops.paused/actions/resume")
    assert (status, answer["error"][:25]) == (403, "the console is read-only;")
    browser.get(base + "/schedules/ops.paused")
    assert not browser.find_elements(By.ID, "actions")
    browser.get(base + "/audit")
    assert "knows no users" in browser.find_element(By.ID, "sign-in-to-audit").text


def _acting_as_alice(browser: WebDriver, base: str) -> None:
    resume = "/api/v1/schedules/ops.paused/actions/resume"
    status, _ = post(base, resume)
    assert status == 401, "an action without credentials"
    alice = "Basic " + base64.b64encode(f"alice:{TOKEN}".encode()).decode()
    status, _ = post(
        base,
        resume,
        {"Authorization": "Basic " + base64.b64encode(b"alice:guess-guess-guess").decode()},
    )
    assert status == 401, "a wrong token"
    status, _ = post(base, resume, {"Authorization": alice, "Origin": "http://elsewhere.example"})
    assert status == 403, "a form posted from another site"
    browser.get(base + "/schedules/ops.paused")
    assert browser.find_elements(By.ID, "sign-in-to-act") and not browser.find_elements(
        By.ID, "actions"
    )
    sign_in(browser, base, "alice", TOKEN)
    browser.get(base + "/schedules/ops.paused")
    form = browser.find_element(By.ID, "actions")
    form.find_element(By.NAME, "reason").send_keys("back to work")
    click_and_load(browser, form.find_element(By.ID, "action-resume"))
    assert browser.find_element(By.ID, "done").text.startswith("Done: resumed ops.paused")

    def resumed() -> bool:
        browser.get(base + "/schedules/ops.paused")
        return bool(browser.find_elements(By.CSS_SELECTOR, "#summary td.active"))

    eventually(resumed, timeout_s=30, message="the resume did not reach the view")
    changes = browser.find_element(By.ID, "changes").text
    assert "alice via console" in changes and "back to work" in changes


def _a_backfill_as_alice(browser: WebDriver, base: str, nominal_at: str) -> None:
    alice = {"Authorization": "Basic " + base64.b64encode(f"alice:{TOKEN}".encode()).decode()}
    backfill = "/api/v1/schedules/billing.every-minute/actions/backfill"
    status, answer = post(base, backfill, alice, {"from": "-1h", "to": "+1h"})
    assert status == 400 and answer["error"].endswith("future ones fire on schedule"), answer
    browser.get(base + "/schedules/billing.every-minute")
    form = browser.find_element(By.ID, "backfill-form")
    for name, value in (("from", nominal_at), ("to", nominal_at), ("reason", "replay it")):
        form.find_element(By.NAME, name).send_keys(value)
    click_and_load(browser, form.find_element(By.ID, "action-backfill"))
    done = browser.find_element(By.ID, "done").text
    assert "requested backfill backfill-" in done and "1 run(s)" in done, done

    def rerun_succeeded() -> bool:
        return any(
            "backfill-" in run["run_id"] for run in succeeded_runs(base, "billing.every-minute")
        )

    eventually(rerun_succeeded, timeout_s=90, message="the backfilled run did not succeed")


def _fires_in_minute(base: str, fired_at: str) -> int:
    minute = fired_at[:17] + "00Z"
    activity = api(base, "/api/v1/activity?hours=1")
    return int(next(m["fires"] for m in activity["minutes"] if m["minute"] == minute))
