"""`http` jobs against real servers on 127.0.0.1, run in the test process as the executor would:
internal addresses refused unless the team's `http_allow` lists them, redirects not followed,
the connection made to the address checked, secret headers sent and kept out of the reason."""

from __future__ import annotations

import http.server
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from devinfra.kafka_cluster_tls import make_tls_files
from kairos.services.executor.http_job import run_http
from kairos.services.executor.jobs import HttpJob, Invocation, JobFailedError
from kairos.services.executor.runtime_policy import TeamRuntime

TOKEN = "tok-5f3a9c1e7b"


class _Service(http.server.BaseHTTPRequestHandler):
    """`/redirect` answers 302 to `/final`; `/echo` answers 500 with the request's headers;
    `/big` 500 with 10 000 bytes; anything else 200. Every request is recorded."""

    requests: list[dict[str, Any]]

    def do_GET(self) -> None:
        self.requests.append({"path": self.path, "headers": dict(self.headers)})
        if self.path == "/redirect":
            self._answer(302, b"moved", {"Location": "/final"})
        elif self.path == "/echo":
            self._answer(500, str(self.headers).encode())
        elif self.path == "/big":
            self._answer(500, b"x" * 10_000)
        else:
            self._answer(200, b"ok")

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        """Quiet: the tests read the recorded requests."""


def _serve(tls: ssl.SSLContext | None = None) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_Service,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], requests
    server.shutdown()
    server.server_close()


@pytest.fixture
def service() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    yield from _serve()


def invocation(
    http_allow: tuple[str, ...] = (),
    owner: str | None = "growth",
    secrets_root: Path | None = None,
    timeout_s: float = 10,
) -> Invocation:
    return Invocation(
        run_id="report@2027-03-14T07:00:00Z",
        schedule_id="report",
        owner=owner,
        attempt=2,
        nominal_at=datetime(2027, 3, 14, 7, tzinfo=UTC),
        timeout=timedelta(seconds=timeout_s),
        stop=threading.Event(),
        deadline=time.monotonic() + timeout_s,
        runtime=TeamRuntime(http_allow=http_allow),
        secrets_root=secrets_root,
    )


def get(url: str, **params: Any) -> HttpJob:
    return HttpJob(url=url, method="GET", **params)


def test_a_server_on_loopback_is_refused_by_default_and_reached_when_allowed(
    service: tuple[int, list[dict[str, Any]]],
) -> None:
    port, requests = service
    url = f"http://127.0.0.1:{port}/ok"
    with pytest.raises(JobFailedError) as refused:
        run_http(get(url), invocation(), 1000)
    assert refused.value.reason == (
        f"request to {url} refused: 127.0.0.1 resolves to 127.0.0.1 (loopback), which "
        "team growth's http jobs may not reach; to allow it, an administrator adds "
        "127.0.0.1/32 (or a network containing it, or the host name 127.0.0.1) to "
        "teams.growth.http_allow in the executor's runtime policy (--runtime-policy)"
    )
    with pytest.raises(JobFailedError, match="runs without an owner may not reach"):
        run_http(get(url), invocation(owner=None), 1000)
    assert requests == [], "a refused request reached the server"

    run_http(get(url), invocation(http_allow=("127.0.0.0/8",)), 1000)
    assert [r["path"] for r in requests] == ["/ok"]
    headers = requests[0]["headers"]
    assert (headers["Idempotency-Key"], headers["X-Kairos-Attempt"]) == (
        "report@2027-03-14T07:00:00Z",
        "2",
    )


def test_a_host_name_in_http_allow_admits_what_it_resolves_to(
    service: tuple[int, list[dict[str, Any]]],
) -> None:
    port, requests = service
    with pytest.raises(JobFailedError, match=r"localhost resolves to 127\.0\.0\.1 \(loopback\)"):
        run_http(get(f"http://localhost:{port}/ok"), invocation(("billing.internal",)), 1000)
    run_http(get(f"http://LocalHost:{port}/ok"), invocation(("localhost",)), 1000)
    assert requests[0]["headers"]["Host"] == f"localhost:{port}"


def test_redirects_are_the_attempts_result_not_followed(
    service: tuple[int, list[dict[str, Any]]],
) -> None:
    port, requests = service
    with pytest.raises(JobFailedError) as redirected:
        run_http(get(f"http://127.0.0.1:{port}/redirect"), invocation(("127.0.0.1",)), 1000)
    assert redirected.value.reason == (
        "HTTP 302 (redirects are not followed; point the job at the final URL: "
        f"http://127.0.0.1:{port}/final)"
    )
    assert [r["path"] for r in requests] == ["/redirect"]


def test_the_connection_goes_to_the_address_checked_not_to_a_second_answer(
    service: tuple[int, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a name whose answer changes after the check. The first answer is checked
    and allowed; any later lookup would answer an address nothing listens on."""
    port, requests = service
    real = socket.getaddrinfo
    answers: list[str] = []

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        answers.append(host)
        return real("127.0.0.1" if len(answers) == 1 else "10.255.255.1", *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    run_http(get(f"http://rebind.test:{port}/ok"), invocation(("127.0.0.1",)), 1000)
    assert answers == ["rebind.test"]
    assert requests[0]["headers"]["Host"] == f"rebind.test:{port}"


def test_a_lookup_that_never_answers_ends_the_attempt_at_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The C resolver takes no timeout: a team's name whose servers never answer must not hold
    a shared executor's worker past the job's own timeout."""
    answered = threading.Event()

    def silent(*_: Any, **__: Any) -> Any:
        answered.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", silent)
    try:
        with pytest.raises(JobFailedError) as failed:
            run_http(get("http://slow.test/ok"), invocation(("slow.test",), timeout_s=0.3), 1000)
        assert not answered.is_set(), "the attempt waited for the lookup"
        assert failed.value.reason == "timed out after 0.3s: resolving slow.test did not finish"
    finally:
        answered.set()


def test_secret_headers_are_sent_and_blanked_out_of_the_reason(
    service: tuple[int, list[dict[str, Any]]], tmp_path: Path
) -> None:
    port, requests = service
    (tmp_path / "growth").mkdir()
    (tmp_path / "growth" / "api-token").write_text(TOKEN + "\n")
    job = get(f"http://127.0.0.1:{port}/echo", secret_headers={"Authorization": "api-token"})
    with pytest.raises(JobFailedError) as failed:
        run_http(job, invocation(("127.0.0.1",), secrets_root=tmp_path), 1000)
    assert requests[0]["headers"]["Authorization"] == TOKEN
    assert "Authorization: [secret]" in failed.value.reason
    assert TOKEN not in failed.value.reason


def test_a_secret_cut_by_the_output_limit_is_blanked_whole(
    service: tuple[int, list[dict[str, Any]]], tmp_path: Path
) -> None:
    port, _ = service
    (tmp_path / "growth").mkdir()
    (tmp_path / "growth" / "api-token").write_text(TOKEN)
    job = get(f"http://127.0.0.1:{port}/echo", secret_headers={"X-Token": "api-token"})
    with pytest.raises(JobFailedError) as unlimited:
        run_http(job, invocation(("127.0.0.1",), secrets_root=tmp_path), 10_000)
    # The limit ends in the middle of the token in the echoed headers.
    limit = unlimited.value.reason.index("[secret]") - len("HTTP 500: ") + 4
    with pytest.raises(JobFailedError) as cut:
        run_http(job, invocation(("127.0.0.1",), secrets_root=tmp_path), limit)
    assert TOKEN[:4] not in cut.value.reason
    assert cut.value.reason.endswith("X-Token: [sec")


def test_bodies_of_failures_are_bounded_by_the_output_limit(
    service: tuple[int, list[dict[str, Any]]],
) -> None:
    port, _ = service
    with pytest.raises(JobFailedError) as failed:
        run_http(get(f"http://127.0.0.1:{port}/big"), invocation(("127.0.0.1",)), 100)
    assert failed.value.reason == "HTTP 500: " + "x" * 100


def test_https_verifies_the_url_host_while_connecting_to_the_checked_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The certificate names localhost and 127.0.0.1; `other.test` resolves to 127.0.0.1 too,
    and is refused by the certificate check: it is the URL's host that is verified."""
    files = make_tls_files(tmp_path / "tls")
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(files.node_keystore)
    serving = _serve(server_tls)
    port, requests = next(serving)
    real = socket.getaddrinfo
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, *a, **k: real(host.replace("other.test", "127.0.0.1"), *a, **k),
    )
    allowed = invocation(("127.0.0.1",))
    try:
        with pytest.raises(JobFailedError, match="CERTIFICATE_VERIFY_FAILED"):
            run_http(get(f"https://localhost:{port}/untrusted"), allowed, 1000)
        monkeypatch.setenv("SSL_CERT_FILE", str(files.ca_certificate))
        with pytest.raises(JobFailedError, match=r"not valid for 'other\.test'"):
            run_http(get(f"https://other.test:{port}/other"), allowed, 1000)
        run_http(get(f"https://localhost:{port}/ok"), allowed, 1000)
        assert [r["path"] for r in requests] == ["/ok"]
    finally:
        next(serving, None)
