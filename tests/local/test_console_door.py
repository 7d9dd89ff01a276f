"""The console's door, over real HTTP to a real server on loopback: Host allow-list, who the
sender is (token, session, trusted proxy), cross-site signals, bodies, rates; and what each team
sees of another's schedules and runs."""

from __future__ import annotations

import base64
import http.client
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import uvicorn

from kairos.core.audit import FiredRun, HistoryEvent, RunEventRecord
from kairos.core.instants import epoch_ms
from kairos.core.schedule import Schedule
from kairos.services.console.acting import ActionDoor
from kairos.services.console.app import Console, build_app
from kairos.services.console.audits import AuditJobs
from kairos.services.console.door import DoorConfig, RateLimit
from kairos.services.console.follower import ViewFollower
from kairos.services.console.herd import ComingHerd
from kairos.services.console.identity import Sessions, TrustedProxy, Users, proxy_networks
from kairos.services.console.redaction import CHANGED, REDACTED
from kairos.services.console.runs import HIDDEN_REASON
from kairos.services.console.view import (
    ChangeRow,
    ConsoleView,
    DeadLetterRow,
    ScheduleRow,
    ViewBatch,
)
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.sql.dialects import SQLITE_SCHEME
from tests.probe_client import free_port

NOW = datetime.now(UTC).replace(microsecond=0)
TOKEN = "0123456789abcdef-token"
PROXY = "127.0.0.2"


class SignedGroup:
    """The tickers' group as `kairos partitions` reads it: partition 0 judged in signed mode."""

    def __init__(self, judged: bool = True) -> None:
        self.judged = judged

    def document(self) -> dict[str, Any]:
        if not self.judged:
            return {"error": "the group cannot be read"}
        entry = {"partition": 0, "owner": "t1", "mode": "signed", "committed_offset": 100,
                 "mode_since": 0}  # fmt: skip
        return {"partitions": [entry]}


class NoAdmins:
    def names(self) -> frozenset[str]:
        return frozenset()

    def close(self) -> None:
        pass


def http_job(token: str) -> dict[str, Any]:
    return {"kind": "http", "url": "https://pay.example/settle",
            "headers": {"Authorization": f"Bearer {token}"}, "body": {"amount": 1}}  # fmt: skip


def shell_job(token: str) -> dict[str, Any]:
    return {"kind": "shell", "command": "report", "env": {"TOKEN": token}}


def schedule_records(view: ConsoleView) -> None:
    batch = ViewBatch()
    for offset, (schedule_id, owner, job) in enumerate(
        [
            ("payments.settle", "payments", http_job("old-secret")),
            ("payments.settle", "payments", http_job("new-secret")),
            ("growth.report", "growth", {"kind": "shell", "command": "true"}),
            # Handed from growth to payments, each with its own token.
            ("shared.report", "growth", shell_job("growth-secret")),
            ("shared.report", "payments", shell_job("payments-secret")),
        ]
    ):
        definition = Schedule.model_validate(
            {"id": schedule_id, "cron": "* * * * *", "owner": owner, "job": job}
        )
        text = definition.model_dump_json(exclude_none=True)
        event = HistoryEvent(schedule_id, 0, offset, "upserted", definition, NOW, "ci", None, 1)
        batch.changes.append(ChangeRow(event, text, owner, False))
        batch.upsert(
            ScheduleRow(
                schedule_id,
                owner,
                False,
                "cron",
                "* * * * *",
                "UTC",
                0,
                offset,
                1,
                epoch_ms(NOW),
                "ci",
                text,
                {},
            )
        )
    nominal = NOW - timedelta(minutes=5)
    run = FiredRun("payments.settle@x", "payments.settle", nominal, nominal, nominal, 9, 1, "t1",
                   0, 0, 0, "payments")  # fmt: skip
    rerun = FiredRun("payments.settle~rerun-fix@x", "payments.settle", nominal, nominal,
                     nominal + timedelta(minutes=2), 0, 1, "t1", 0, 0, 1, "payments")  # fmt: skip
    batch.fired.extend([run, rerun])
    for attempt, kind in ((1, "failed"), (2, "succeeded")):
        reason = "HTTP 500: card service said boom" if kind == "failed" else None
        batch.events.append(
            RunEventRecord(run.run_id, run.schedule_id, kind, attempt, "e1", nominal, nominal,
                           nominal, nominal + timedelta(seconds=attempt), reason, None, 0, attempt)
        )  # fmt: skip
    batch.events.append(
        RunEventRecord(rerun.run_id, rerun.schedule_id, "failed", 1, "e2", nominal,
                       rerun.fired_at, rerun.fired_at, rerun.fired_at, "exit status 1", None, 0, 3)
    )  # fmt: skip
    batch.dead_letters.append(
        DeadLetterRow("dead-letters", 0, 0, "runs", 0, 9, "JobFailedError",
                      "3 of 3 attempts failed; the last: OUTPUT password=hunter2", 1,
                      "payments.settle")
    )  # fmt: skip
    view.apply(batch)


@dataclass
class Served:
    port: int

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        source: str = "127.0.0.1",
    ) -> tuple[int, dict[str, str], str]:
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=10, source_address=(source, 0)
        )
        sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text

    def sign_in(self, name: str) -> str:
        """The session cookie a browser gets from the login form."""
        form = urlencode({"name": name, "token": TOKEN, "next": "/runs"}).encode()
        status, headers, _ = self.request(
            "POST", "/login", {"Content-Type": "application/x-www-form-urlencoded"}, form
        )
        assert status == 303 and headers["location"] == "/runs", (status, headers)
        return headers["set-cookie"].split(";", 1)[0]


def serve(
    tmp_path: Path, require_login: bool = False, group: SignedGroup | None = None
) -> Iterator[Served]:
    group = group or SignedGroup()
    users_file = tmp_path / "users"
    users_file.write_text(f"paula:{TOKEN}:payments\ngary:{TOKEN}:growth\n")
    users_file.chmod(0o600)
    view = ConsoleView(f"{SQLITE_SCHEME}{tmp_path / 'view.sqlite'}")
    schedule_records(view)
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")
    door = DoorConfig(
        frozenset({"127.0.0.1", "localhost"}),
        Sessions(b"s" * 32, 3600),
        Users.load(users_file),
        TrustedProxy(proxy_networks(PROXY), group_prefix="kairos-"),
        require_login=require_login,
        rate=RateLimit(5),
    )
    console = Console(
        view, ViewFollower(settings, view), group,  # type: ignore[arg-type]
        AuditJobs(view, lambda *_: {"verdict": "holds", "findings": []}), ComingHerd(view), door,
        ActionDoor(settings, NoAdmins()),
    )  # fmt: skip
    port = free_port()
    config = uvicorn.Config(build_app(console), host="127.0.0.1", port=port, proxy_headers=False)
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the console did not start"
        time.sleep(0.05)
    yield Served(port)
    server.should_exit = True
    console.herd.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    yield from serve(tmp_path)


def test_a_foreign_host_is_refused_and_probes_answer_any(served: Served) -> None:
    assert served.request("GET", "/schedules")[0] == 200
    status, _, text = served.request("GET", "/schedules", {"Host": "evil.example:8080"})
    assert status == 400 and "does not answer Host 'evil.example:8080'" in text
    assert served.request("GET", "/readyz", {"Host": "10.1.2.3:8080"})[0] == 200


def test_identity_headers_count_only_from_the_trusted_proxy(served: Served) -> None:
    claim = {"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "kairos-payments"}
    status, _, text = served.request("GET", "/api/v1/schedules/payments.settle", claim)
    assert status == 403 and "taken only from the console's trusted proxies" in text
    status, _, text = served.request(
        "GET", "/api/v1/schedules/payments.settle", claim, source=PROXY
    )
    assert status == 200
    job = json.loads(text)["schedule"]["definition"]["job"]
    assert job["headers"]["Authorization"] == "Bearer new-secret", "payments sees its own"


def test_another_team_sees_secrets_redacted_in_pages_diffs_and_the_api(served: Served) -> None:
    growth = {"Cookie": served.sign_in("gary")}
    status, _, text = served.request("GET", "/api/v1/schedules/payments.settle", growth)
    page = json.loads(text)
    job = page["schedule"]["definition"]["job"]
    assert job["headers"] == {"Authorization": REDACTED} and job["body"] == REDACTED
    rotation = "\n".join(page["last_changes"][0]["diff"])
    assert CHANGED in rotation and "secret" not in rotation, rotation
    status, _, html = served.request("GET", "/schedules/payments.settle", growth)
    assert status == 200 and "secret" not in html, re.findall(".{60}secret.{60}", html)
    assert escape(REDACTED) in html
    payments = {"Cookie": served.sign_in("paula")}
    _, _, html = served.request("GET", "/schedules/payments.settle", payments)
    assert "Bearer new-secret" in html


def test_runs_show_failures_first_and_their_output_only_to_the_owning_team(
    served: Served,
) -> None:
    growth = {"Cookie": served.sign_in("gary")}
    _, _, text = served.request("GET", "/api/v1/runs/payments.settle@x", growth)
    shown = json.loads(text)
    assert [(e["attempt"], e["kind"]) for e in shown["events"]] == [(1, "failed"), (2, "succeeded")]
    assert shown["events"][0]["reason"] == HIDDEN_REASON
    assert [other["run_id"] for other in shown["same_occurrence"]] == [
        "payments.settle~rerun-fix@x"
    ]
    payments = {"Cookie": served.sign_in("paula")}
    _, _, html = served.request("GET", "/runs/payments.settle@x", payments)
    assert "card service said boom" in html and 'href="/schedules/payments.settle"' in html
    _, _, text = served.request("GET", "/api/v1/runs?team=payments", payments)
    listed = [run["run_id"] for run in json.loads(text)["runs"]]
    assert listed == ["payments.settle~rerun-fix@x", "payments.settle@x"], "failed first"


def test_a_team_may_not_act_on_another_teams_schedule(served: Served) -> None:
    status, _, text = served.request(
        "POST",
        "/api/v1/schedules/payments.settle/actions/pause",
        {"Authorization": basic("gary"), "X-Kairos-Client": "test",
         "Content-Type": "application/json"},
        b'{"reason": "mine now"}',
    )  # fmt: skip
    assert status == 403, text
    assert "gary (growth) may act only on its teams' schedules" in text
    assert "belongs to team 'payments'" in text


def test_posts_need_every_cross_site_signal_and_a_small_body(served: Served) -> None:
    api = {"Authorization": basic("paula"), "Content-Type": "application/json"}
    audits = "/api/v1/audits"
    body = b'{"from": "-1h", "to": "-1m"}'
    assert served.request("POST", audits, api, body)[0] == 403, "no X-Kairos-Client"
    api["X-Kairos-Client"] = "test"
    cross = {**api, "Sec-Fetch-Site": "cross-site"}
    assert served.request("POST", audits, cross, body)[0] == 403
    elsewhere = {**api, "Origin": "http://evil.example"}
    assert served.request("POST", audits, elsewhere, body)[0] == 403
    status, _, _ = served.request("POST", audits, {**api, "Authorization": "Basic eDp5"}, body)
    assert status == 401, "unknown users are refused before the body is read"
    assert served.request("POST", audits, api, b"x" * 20_000)[0] == 413
    assert served.request("POST", audits, api, body)[0] == 202
    cookie = served.sign_in("paula")
    form = {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}
    window = urlencode({"from": "-1h", "to": "-1m"}).encode()
    status, _, text = served.request("POST", "/audit", form, window)
    assert status == 403 and "CSRF" in text, "a form without the session's token"


def test_a_user_posting_too_often_is_slowed(served: Served) -> None:
    api = {"Authorization": basic("gary"), "X-Kairos-Client": "t",
           "Content-Type": "application/json"}  # fmt: skip
    path = "/api/v1/schedules/payments.settle/actions/pause"
    statuses = [served.request("POST", path, api, b"{}")[0] for _ in range(7)]
    assert statuses[:5] == [403] * 5 and statuses[5:] == [429, 429], statuses


def basic(name: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{TOKEN}".encode()).decode()


def test_a_console_requiring_login_shows_nothing_to_a_stranger(tmp_path: Path) -> None:
    for served in serve(tmp_path, require_login=True):
        status, headers, _ = served.request("GET", "/runs")
        assert status == 303 and headers["location"] == "/login?next=/runs"
        assert served.request("GET", "/api/v1/schedules")[0] == 401
        assert served.request("GET", "/login")[0] == 200
        assert (
            served.request("GET", "/api/v1/schedules", {"Cookie": served.sign_in("gary")})[0] == 200
        )


def test_guessing_tokens_at_the_sign_in_form_is_slowed(served: Served) -> None:
    guess = urlencode({"name": "paula", "token": "x" * 20}).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    statuses = [served.request("POST", "/login", form, guess)[0] for _ in range(6)]
    assert statuses == [401] * 5 + [429], statuses


def test_a_proxy_users_csrf_token_never_signs_a_session(served: Served) -> None:
    payload = {"u": "paula", "x": 9_999_999_999, "c": "zz", "f": "0" * 32}
    name = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
    proxied = {"X-Forwarded-User": name, "X-Forwarded-Groups": "kairos-growth"}
    _, _, html = served.request("GET", "/audit", proxied, source=PROXY)
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert token is not None
    forged = {"Cookie": f"kairos_session={name}.{token.group(1)}"}
    _, _, text = served.request("GET", "/api/v1/schedules/payments.settle", forged)
    assert "new-secret" not in text, "a forged session is nobody"


def test_a_chunked_body_is_refused_whatever_length_it_claims(served: Served) -> None:
    status, _, _ = served.request(
        "POST",
        "/login",
        {"Content-Length": "10", "Transfer-Encoding": "chunked",
         "Content-Type": "application/x-www-form-urlencoded"},
        b"5\r\nname=\r\n0\r\n\r\n",
    )  # fmt: skip
    assert status == 411


def test_dead_letter_reasons_are_shown_only_to_the_owning_team(served: Served) -> None:
    for who, shown in ((None, False), ("gary", False), ("paula", True)):
        headers = {} if who is None else {"Cookie": served.sign_in(who)}
        _, _, text = served.request("GET", "/api/v1/dead-letters", headers)
        (letter,) = json.loads(text)["dead_letters"]
        assert ("hunter2" in letter["reason"]) is shown, (who, letter)


def test_a_version_of_another_owner_stays_redacted_after_a_handover(served: Served) -> None:
    payments = {"Cookie": served.sign_in("paula")}
    _, _, text = served.request("GET", "/api/v1/schedules/shared.report", payments)
    page = json.loads(text)
    assert page["schedule"]["definition"]["job"]["env"]["TOKEN"] == "payments-secret"
    assert "growth-secret" not in text, "growth's token was growth's, even to the new owner"


def test_unjudged_secrets_are_shown_to_no_one_and_actions_wait(tmp_path: Path) -> None:
    for served in serve(tmp_path, group=SignedGroup(judged=False)):
        payments = {"Cookie": served.sign_in("paula")}
        _, _, text = served.request("GET", "/api/v1/schedules/payments.settle", payments)
        assert "new-secret" not in text
        status, _, text = served.request(
            "POST", "/api/v1/schedules/payments.settle/actions/pause",
            {"Authorization": basic("paula"), "X-Kairos-Client": "t",
             "Content-Type": "application/json"}, b"{}",
        )  # fmt: skip
        assert status == 403 and "verdict" in text, text


def test_an_identity_header_sent_twice_is_refused(served: Served) -> None:
    connection = http.client.HTTPConnection(
        "127.0.0.1", served.port, timeout=10, source_address=(PROXY, 0)
    )
    connection.putrequest("GET", "/api/v1/schedules/payments.settle", skip_host=True)
    connection.putheader("Host", f"127.0.0.1:{served.port}")
    connection.putheader("X-Forwarded-User", "victim")
    connection.putheader("X-Forwarded-User", "attacker")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 403 and b"twice" in response.read()


def test_guessing_a_token_over_basic_is_slowed_even_before_the_right_one(served: Served) -> None:
    wrong = {"Authorization": "Basic " + base64.b64encode(b"paula:" + b"x" * 20).decode()}
    statuses = [served.request("GET", "/schedules", wrong)[0] for _ in range(11)]
    assert statuses[:10] == [200] * 10 and statuses[10] == 429, statuses
    assert served.request("GET", "/schedules", {"Authorization": basic("paula")})[0] == 429
    assert served.request("GET", "/schedules", {"Authorization": basic("gary")})[0] == 200


def test_signing_out_ends_the_session_and_odd_input_is_no_crash(served: Served) -> None:
    cookie = served.sign_in("paula")
    _, _, html = served.request("GET", "/schedules", {"Cookie": cookie})
    token = re.search(r'name="csrf" value="([^"]+)"', html)
    assert token is not None
    form = {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"}
    assert served.request("POST", "/logout", form, f"csrf={token.group(1)}".encode())[0] == 303
    _, _, text = served.request("GET", "/api/v1/schedules/payments.settle", {"Cookie": cookie})
    assert "new-secret" not in text, "a signed-out session is nobody"
    assert served.request("GET", "/schedules", {"Cookie": "kairos_session=abc.\u00e9"})[0] == 200
    assert served.request("GET", "/api/v1/audits/99999999999999999999999")[0] == 404
