"""`http` jobs: one request, its run id as the idempotency key, to an address the team may reach.

The URL's host is resolved once, every address it resolves to is checked against the team's
egress (`egress`), and the connection goes to a checked address: a name whose DNS answer
changes between the check and the connection (DNS rebinding) cannot lead it elsewhere. The
Host header, TLS's SNI and the certificate check still use the URL's host name. Redirects are
not followed: a 3xx is the attempt's result, so a public URL cannot send the request inside.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kairos.services.executor.egress import (
    HttpAllow,
    HttpAllowError,
    http_refusal_reason,
    policy_place,
    refused_address,
    unscoped,
)
from kairos.services.executor.jobs import (
    INTERVAL_FIELDS,
    HttpJob,
    Invocation,
    JobFailedError,
    payload_bytes,
)
from kairos.services.executor.secrets import resolve_secrets, scrub

SockAddr = tuple[socket.AddressFamily, socket.SocketKind, int, tuple[Any, ...]]
"""What `socket.socket` and `connect` need of one `getaddrinfo` answer."""


@dataclass(frozen=True)
class _Target:
    url: str
    https: bool
    host: str
    port: int
    path: str


def run_http(job: HttpJob, invocation: Invocation, output_limit: int) -> None:
    secrets = resolve_secrets(invocation.secrets_root, invocation.owner, job.secret_headers)
    try:
        _run(job, invocation, output_limit, secrets)
    except JobFailedError as failed:
        # The reason goes into run events every team reads; a server may echo a header back.
        raise JobFailedError(scrub(failed.reason, secrets.values())) from None


def _run(job: HttpJob, invocation: Invocation, output_limit: int, secrets: dict[str, str]) -> None:
    target = _target(job.url)
    addresses = _checked_addresses(target, invocation)
    # Reading past the limit by the longest secret lets `scrub` see whole a value the limit
    # would cut.
    read_limit = output_limit + max((len(v.encode()) for v in secrets.values()), default=0)
    # The timeout bounds the connection and each read; a stop request cannot interrupt a
    # request in flight, so http jobs stop at the latest when their timeout passes.
    connection = _connection(target, addresses, max(0.001, invocation.remaining_s()))
    try:
        connection.request(
            job.method.upper(),
            target.path,
            payload_bytes(job.body),
            _headers(job, invocation, secrets),
        )
        response = connection.getresponse()
        status, location = response.status, response.getheader("Location")
        body = response.read(read_limit)
    # ValueError: http.client refuses a header value with a line break (a secret's included).
    except (OSError, http.client.HTTPException, ValueError) as error:
        if isinstance(error, TimeoutError) or invocation.remaining_s() <= 0:
            raise JobFailedError(invocation.timed_out_reason()) from None
        cause = str(error) or type(error).__name__
        raise JobFailedError(f"request to {job.url} failed: {cause}") from None
    finally:
        connection.close()
    # Blanked before the cut, which could otherwise leave the first characters of a value.
    text = scrub(body.decode(errors="replace"), secrets.values())[:output_limit]
    _judge(target, status, location, text)


def _header_name(field: str) -> str:
    """`INTERVAL_START_LOCAL` -> `X-Kairos-Interval-Start-Local`."""
    return "X-Kairos-" + "-".join(part.capitalize() for part in field.split("_"))


def _headers(job: HttpJob, invocation: Invocation, secrets: dict[str, str]) -> dict[str, str]:
    kairos = {
        # The run id is the idempotency key: a retried or redelivered run sends the same one,
        # so a service that honours it applies the request's effect once.
        "Idempotency-Key": invocation.run_id,
        "X-Kairos-Schedule-Id": invocation.schedule_id,
        "X-Kairos-Attempt": str(invocation.attempt),
        **{_header_name(name): value for name, value in invocation.interval_fields().items()},
    }
    # Header names are case-insensitive: a job's `idempotency-key` would be sent beside ours.
    ours = {name.lower() for name in kairos} | {
        _header_name(name).lower() for name in INTERVAL_FIELDS
    }
    headers = {n: v for n, v in {**job.headers, **secrets}.items() if n.lower() not in ours}
    if isinstance(job.body, dict | list) and "content-type" not in {n.lower() for n in headers}:
        headers["Content-Type"] = "application/json"
    return {**headers, **kairos}


def _judge(target: _Target, status: int, location: str | None, text: str) -> None:
    if 200 <= status < 300:
        return
    if 300 <= status < 400 and location is not None:
        final = urllib.parse.urljoin(target.url, location)
        raise JobFailedError(
            f"HTTP {status} (redirects are not followed; point the job at the final URL: {final})"
        )
    text = text.strip()
    raise JobFailedError(f"HTTP {status}" + (f": {text}" if text else ""))


def _target(url: str) -> _Target:
    parts = urllib.parse.urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise JobFailedError(
            f"url {url}: credentials in a URL are not sent (and every team reads the schedule); "
            "put them in a header from the team's secrets (secret_headers: {Authorization: NAME})"
        )
    try:
        port = parts.port
    except ValueError:
        raise JobFailedError(f"url {url}: the port is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise JobFailedError(f"url {url} has no host; write http(s)://host/path")
    https = parts.scheme.lower() == "https"
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    return _Target(url, https, parts.hostname, port or (443 if https else 80), path)


def _checked_addresses(target: _Target, invocation: Invocation) -> list[SockAddr]:
    """Every address the host resolves to, once all of them are known to be allowed."""
    try:
        allow = HttpAllow.parse(invocation.runtime.http_allow)
    except HttpAllowError as error:
        raise JobFailedError(
            f"{error}, in {policy_place(invocation.owner, 'http_allow')} of the executor's "
            "runtime policy; an administrator corrects it"
        ) from None
    resolved = _resolve(target, invocation)
    # Only IP answers can be checked and connected to; `type=SOCK_STREAM` asks for no other.
    addresses: list[SockAddr] = [
        (family, kind, proto, sockaddr)
        for family, kind, proto, _, sockaddr in resolved
        if isinstance(sockaddr[0], str)
    ]
    refusal = refused_address(target.host, [unscoped(str(a[3][0])) for a in addresses], allow)
    if refusal is not None:
        raise JobFailedError(
            http_refusal_reason(target.url, target.host, refusal, invocation.owner)
        )
    return addresses


def _resolve(target: _Target, invocation: Invocation) -> list[Any]:
    """`getaddrinfo`, within the job's timeout: the C resolver takes no timeout, so the lookup
    runs on a thread of its own, left to finish by itself if the job gives up on it (one
    thread a slow lookup, so one team's slow names hold up no other team's jobs)."""
    answer: list[Any] = []
    failure: list[BaseException] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            answer.extend(socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM))
        except BaseException as error:  # handed to the job's thread, which judges it
            failure.append(error)
        finally:
            done.set()

    threading.Thread(target=lookup, name=f"resolve-{target.host}", daemon=True).start()
    if not done.wait(invocation.remaining_s()):
        raise JobFailedError(
            f"{invocation.timed_out_reason()}: resolving {target.host} did not finish"
        )
    if failure:
        error = failure[0]
        if not isinstance(error, (OSError, UnicodeError)):
            raise error
        raise JobFailedError(
            f"request to {target.url} failed: cannot resolve {target.host}: {error}"
        ) from None
    return answer


def _connect(addresses: Sequence[SockAddr], timeout: float) -> socket.socket:
    """A socket connected to the first of `addresses` that answers (all of them checked)."""
    failure: OSError = OSError("no address to connect to")
    for family, kind, proto, sockaddr in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as error:
            sock.close()
            failure = error
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise failure


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to checked addresses, never resolving the host name a second time."""

    def __init__(self, target: _Target, addresses: Sequence[SockAddr], timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._addresses = addresses
        self._timeout = timeout

    def connect(self) -> None:
        self.sock = _connect(self._addresses, self._timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """`_PinnedHTTPConnection` with TLS: SNI and the certificate's name are the URL's host."""

    def __init__(self, target: _Target, addresses: Sequence[SockAddr], timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(target.host, target.port, timeout=timeout, context=self._tls)
        self._addresses = addresses
        self._timeout = timeout

    def connect(self) -> None:
        plain = _connect(self._addresses, self._timeout)
        try:
            self.sock = self._tls.wrap_socket(plain, server_hostname=self.host)
        except OSError:
            plain.close()
            raise


def _connection(
    target: _Target, addresses: Sequence[SockAddr], timeout: float
) -> http.client.HTTPConnection:
    if target.https:
        return _PinnedHTTPSConnection(target, addresses, timeout)
    return _PinnedHTTPConnection(target, addresses, timeout)
