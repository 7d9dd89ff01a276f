"""The notifier tells each team on its own routes, at least once, through a SIGKILL (#42).

Real parts: the broker, the notifier's processes, HTTP receivers on loopback and an SMTP server
(aiosmtpd). Run events of two teams (and of nobody) and a refused change are on the topics; the
notifier is killed while it delivers and started again. Every notice reaches its team's routes,
none another team's, a repeat carries the same idempotency key, a webhook's signature verifies
with its secret, and a route that refuses is reported where the team reads its rejections.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope
from confluent_kafka import Producer

from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.history import HistoryReader
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.dead_letters import dead_letter_record
from tests.helpers import eventually
from tests.probe_client import free_port, get
from tests.processes import ServiceProcess

SECRET = b"payments-webhook-secret-0123456789"
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
RUNS = 60
HELD_AFTER = 5


@dataclass
class Received:
    lock: threading.Lock = field(default_factory=threading.Lock)
    posts: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    mails: list[tuple[list[str], Any]] = field(default_factory=list)
    tries: dict[tuple[str, str], int] = field(default_factory=dict)
    gate: threading.Event = field(default_factory=threading.Event)
    """Until set, payments' receiver takes its first `HELD_AFTER` notices and holds the rest
    unanswered: the notifier is killed with deliveries under way, whatever the machine's speed."""

    def of(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                {"key": h["idempotency-key"], "headers": h, "body": json.loads(b)}
                for p, h, b in self.posts
                if p == path
            ]


def receiver(received: Received) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            key = self.headers["Idempotency-Key"]
            with received.lock:
                tries = received.tries[self.path, key] = received.tries.get((self.path, key), 0) + 1
            status = {"/payments": 200, "/slack": 200, "/gone": 404, "/moved": 302}.get(
                self.path, 200
            )
            if self.path == "/growth":
                status = 503 if tries == 1 else 200  # every notice retried once
            if self.path == "/payments":
                with received.lock:
                    seen = sum(1 for (path, _), n in received.tries.items() if path == self.path)
                if seen > HELD_AFTER:
                    received.gate.wait(60)
            if status == 200:
                with received.lock:
                    received.posts.append(
                        (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
            self.send_response(status)
            if status == 302:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class MailBox:
    def __init__(self, received: Received) -> None:
        self._received = received

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Envelope) -> str:  # noqa: N802
        assert isinstance(envelope.content, bytes)
        with self._received.lock:
            self._received.mails.append(
                (list(envelope.rcpt_tos), message_from_bytes(envelope.content))
            )
        return "250 OK"


@pytest.fixture
def received() -> Iterator[tuple[Received, str, int]]:
    box = Received()
    web = receiver(box)
    smtp = Controller(MailBox(box), hostname="127.0.0.1", port=free_port())
    smtp.start()
    yield box, f"http://127.0.0.1:{web.server_port}", smtp.port
    smtp.stop()
    web.shutdown()


def routes_file(tmp_path: Path, base: str) -> Path:
    secret = tmp_path / "payments.secret"
    secret.write_bytes(SECRET)
    path = tmp_path / "routes.yaml"
    path.write_text(
        f"""teams:
  payments:
    - {{name: hook, webhook: "{base}/payments", secret_file: "{secret}"}}
    - {{name: mail, email: [oncall@payments.example]}}
  growth:
    - {{name: hook, webhook: "{base}/growth", secret_file: "{secret}", about: [failed]}}
    - {{name: chat, slack: "{base}/slack", about: [failed, refused]}}
    - {{name: old, webhook: "{base}/gone", secret_file: "{secret}", about: [failed]}}
    - {{name: moved, webhook: "{base}/moved", secret_file: "{secret}", about: [failed]}}
    - {{name: down, slack: "http://127.0.0.1:{free_port()}/nobody", about: [failed]}}
    - {{name: typo, slack: "ftp://chat.example", about: [failed]}}
"""
    )
    path.chmod(0o600)
    return path


def run_event(number: int, owner: str | None, kind: str) -> dict[str, Any]:
    nominal = T0 + timedelta(minutes=number)
    return {
        "run_id": f"{owner}.job@{number}", "schedule_id": f"{owner}.job", "kind": kind,
        "attempt": 3, "executor_instance": "e1", "nominal_at": nominal, "fired_at": nominal,
        "started_at": nominal, "finished_at": nominal + timedelta(seconds=1),
        "reason": "exit status 1; output: line one\nline two", "next_attempt_at": None,
        "owner": owner,
    }  # fmt: skip


def publish_history(settings: KafkaSettings) -> dict[str, set[str]]:
    """The records, and the run ids each team must be told of."""
    codecs, producer = make_codecs(), Producer(settings.producer_config())
    events_topic = settings.layout.name(TopicRole.RUN_EVENTS)
    owed: dict[str, set[str]] = {"payments": set(), "growth": set()}
    for number in range(RUNS):
        owner = ("payments", "growth", None)[number % 3]
        kind = "succeeded" if number % 5 == 4 else "dead_lettered"
        event = run_event(number, owner, kind)
        producer.produce(events_topic, codecs.run_event.encode(event), event["run_id"])
        if owner is not None and kind == "dead_lettered":
            owed[owner].add(event["run_id"])
    refusal = dead_letter_record(
        source_topic=settings.layout.name(TopicRole.SCHEDULES), source_partition=0,
        source_offset=7, key=b"payments.job", value=None, reason="belongs to team 'payments'",
        error_class="OwnershipRefusedError", dead_lettered_at=T0, dead_lettered_by="t1",
        reported_to="growth",
    )  # fmt: skip
    producer.produce(
        settings.layout.name(TopicRole.DEAD_LETTERS), codecs.dead_letter.encode(refusal), b"k"
    )
    assert producer.flush(30) == 0
    return owed


def start_notifier(
    settings: KafkaSettings, routes: Path, smtp_port: int, log: Path, metrics_port: int = 0
) -> ServiceProcess:
    arguments = [
        "--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix", settings.topic_prefix,
        "--log-format", "json", "notifier", "--instance", "n1", "--routes-file", str(routes),
        "--from-beginning",
        "--smtp-host", "127.0.0.1", "--smtp-port", str(smtp_port), "--attempts", "3",
        "--first-retry", "200ms", "--longest-retry", "1s", "--concurrency", "4",
        *(["--metrics-port", str(metrics_port)] if metrics_port else []),
    ]  # fmt: skip
    return ServiceProcess(arguments, log)


def test_each_team_is_told_on_its_own_routes_at_least_once_through_a_kill(
    kafka_settings: KafkaSettings, tmp_path: Path, received: tuple[Received, str, int]
) -> None:
    box, base, smtp_port = received
    owed = publish_history(kafka_settings)
    routes = routes_file(tmp_path, base)
    notifier = start_notifier(kafka_settings, routes, smtp_port, tmp_path / "n1.log")
    try:
        eventually(lambda: len(box.of("/payments")) >= HELD_AFTER, timeout_s=60)
        notifier.kill()  # SIGKILL, mid-batch: deliveries held unanswered at the receiver
        box.gate.set()
        metrics_port = free_port()
        notifier = start_notifier(
            kafka_settings, routes, smtp_port, tmp_path / "n1b.log", metrics_port
        )

        def all_told() -> bool:
            return (
                _run_ids(box.of("/payments")) == owed["payments"]
                and _mailed(box) == owed["payments"]
                and _run_ids(box.of("/growth")) == owed["growth"]
                and _run_ids(box.of("/slack"), text=True) >= owed["growth"]
            )

        eventually(all_told, timeout_s=90, message="not every notice was delivered")
        assert get(metrics_port, "/readyz") == (200, "ok\n"), "told, in its group, so ready"
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        text = metrics.read().decode()
        assert 'kairos_notifier_deliveries_total{kind="webhook",result="dead_lettered"}' in text
        assert 'kairos_notifier_deliveries_total{kind="email",result="delivered"}' in text
        # Read while the notifier runs: the unreachable route's last tries end after the rest.
        _a_refusing_route_is_reported_to_its_team(kafka_settings, owed["growth"])
    finally:
        assert notifier.stop() == 0, notifier.log()[-3000:]
    _only_their_own_and_the_same_key_when_repeated(box)
    _the_log_is_json_with_each_runs_fields(tmp_path / "n1b.log")


def _the_log_is_json_with_each_runs_fields(log: Path) -> None:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    told = [line for line in lines if line["message"].startswith("notice run/")]
    assert told and all({"run_id", "schedule_id", "owner"} <= set(line) for line in told)
    assert {line["owner"] for line in told} <= {"payments", "growth"}


def _run_ids(posts: list[dict[str, Any]], text: bool = False) -> set[str]:
    if text:  # Slack's format: one line of text naming the run
        return {p["body"]["text"].rsplit("(", 1)[1].split(")")[0] for p in posts}
    return {p["body"]["run_id"] for p in posts}


def _mailed(box: Received) -> set[str]:
    with box.lock:
        mails = list(box.mails)
    assert all(rcpt == ["oncall@payments.example"] for rcpt, _ in mails)
    return {json.loads(mail.get_payload(decode=True))["run_id"] for _, mail in mails}


def _only_their_own_and_the_same_key_when_repeated(box: Received) -> None:
    for path, team in (("/payments", "payments"), ("/growth", "growth")):
        posts = box.of(path)
        assert {p["body"]["team"] for p in posts} == {team}
        keys: dict[str, set[str]] = {}
        for post in posts:
            keys.setdefault(post["body"]["run_id"], set()).add(post["key"])
            timestamp, mac = (
                part.split("=", 1)[1] for part in post["headers"]["x-kairos-signature"].split(",")
            )
            body = json.dumps(post["body"], sort_keys=True).encode()
            expected = hmac.new(SECRET, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(mac, expected), "the signature verifies with the secret"
        assert all(len(k) == 1 for k in keys.values()), "a repeat carries the same key"
    run_ids = [post["body"]["run_id"] for post in box.of("/payments")]
    assert len(run_ids) > len(set(run_ids)), "the held deliveries were delivered again"
    slack = [p["body"]["text"] for p in box.of("/slack")]
    assert any("refused" in text and "payments.job" in text for text in slack), slack
    assert not any("payments.job@" in text for text in slack), "growth is told growth's runs"


def _a_refusing_route_is_reported_to_its_team(settings: KafkaSettings, growth: set[str]) -> None:
    """Where growth reads its rejections: each notice a route refused, redirected or never
    answered, with why; and the route it wrote wrong (the others went on)."""

    def reported(route: str) -> list[Any]:
        letters = HistoryReader(settings).refused_changes("growth")
        return [r for r in letters if f"on route {route} " in r.reason or f"{route}:" in r.reason]

    for route, why, count in (
        ("old", "HTTP 404", len(growth)),
        ("moved", "point the route at the final URL", len(growth)),
        ("down", "no answer: ConnectionRefusedError", len(growth)),
    ):
        letters = eventually(lambda r=route, c=count: len(reported(r)) >= c and reported(r), 60)
        assert all(why in letter.reason for letter in letters), letters[0].reason
    typo = [r for r in HistoryReader(settings).refused_changes("growth") if "route 6" in r.reason]
    assert typo and "not an http:// or https:// URL" in typo[0].reason, typo
    assert not HistoryReader(settings).refused_changes("payments")
