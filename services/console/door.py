"""The console's door: every request passes it before a route runs.

In order: the Host must be one the console answers (a page elsewhere cannot read it through a
rebound DNS name); the sender's identity is resolved (`kairos.services.console.identity`), and
identity headers from anywhere but the trusted proxy are refused; a state-changing request
(actions, audits, signing in and out) must declare a small body, come from the console's own
pages by every signal a browser gives (`Sec-Fetch-Site`, `Origin`; an API post also carries
`X-Kairos-Client`, which no page elsewhere can send without a preflight the console never
grants), and, but for signing in, come from someone the console knows, within their rate. Only
then does a route read the body. Forms also carry the session's CSRF token, which the routes
check (`csrf_refusal`), since only they read forms.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from kairos.core.errors import KairosError
from kairos.services.console.identity import (
    SESSION_COOKIE,
    Identity,
    IdentityRefusedError,
    Sessions,
    TrustedProxy,
    Users,
)

API_CLIENT_HEADER = "X-Kairos-Client"
MAX_BODY_BYTES = 16 * 1024
"""Forms and JSON of actions and audits are a few hundred bytes."""
PROBES = frozenset({"/livez", "/readyz", "/metrics"})
"""Answered whatever the Host: probes and scrapers address a pod by its IP, and they read no
schedule."""
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_SAFE = frozenset({"GET", "HEAD"})
_OPEN_POSTS = frozenset({"/login"})
"""State-changing paths taken before anyone is known: signing in."""


@dataclass
class RateLimit:
    """At most `per_minute` posts a user a minute, counted per clock minute."""

    per_minute: int
    _counts: dict[str, tuple[int, int]] = field(default_factory=dict)

    def allows(self, user: str, now_s: float) -> bool:
        minute = int(now_s // 60)
        seen_minute, count = self._counts.get(user, (minute, 0))
        count = count + 1 if seen_minute == minute else 1
        self._counts = {u: c for u, c in self._counts.items() if c[0] == minute}
        self._counts[user] = (minute, count)
        return count <= self.per_minute

    def exceeded(self, user: str, now_s: float) -> bool:
        """Whether `user` has used up this minute, without counting."""
        seen_minute, count = self._counts.get(user, (-1, 0))
        return seen_minute == int(now_s // 60) and count >= self.per_minute


class SignInLimitError(KairosError):
    """Too many wrong tokens: the message says to wait."""


@dataclass(frozen=True)
class DoorConfig:
    """What the door knows: who may come in, by which name, from where."""

    hosts: frozenset[str]
    sessions: Sessions
    users: Users | None = None
    proxy: TrustedProxy | None = None
    public_origin: str | None = None
    require_login: bool = False
    rate: RateLimit = field(default_factory=lambda: RateLimit(30))
    failures: RateLimit = field(default_factory=lambda: RateLimit(10))
    """Wrong tokens a minute, per address and name."""
    revoked: set[str] = field(default_factory=set)
    """Nonces of sessions signed out of in this process (kept until it restarts; a session
    lasts `lifetime_s` at most)."""
    clock: Callable[[], float] = time.time

    @property
    def knows_anyone(self) -> bool:
        return self.users is not None or self.proxy is not None

    def who(self, request: Request) -> Identity | None:
        """The sender, with the CSRF token their forms carry; raises `IdentityRefusedError`, or
        `SignInLimitError` after too many wrong tokens from one address for one name."""
        peer = request.client.host if request.client else None
        proxy = TrustedProxy(frozenset()) if self.proxy is None else self.proxy
        headers = request.headers
        identity = proxy.identity(
            peer, headers.getlist(proxy.user_header), headers.getlist(proxy.groups_header)
        )
        if identity is None:
            cookie = request.cookies.get(SESSION_COOKIE)
            identity = self.sessions.read(cookie, self.users, int(self.clock()))
            if identity is not None and identity.csrf in self.revoked:
                identity = None
        if identity is None and self.users is not None and "authorization" in headers:
            identity = self.signed_in(peer, *basic_credentials(headers["authorization"]))
        if identity is None:
            return None
        csrf = self.sessions.csrf_token(identity)
        return Identity(identity.user, identity.teams, identity.via, csrf)

    def signed_in(self, peer: str | None, name: str, token: str) -> Identity | None:
        """The user a name and token prove, counting wrong tokens per address and name: past
        the limit even the right token waits, so guessing is slowed, and one address guessing
        one name does not lock out the others behind the same proxy."""
        assert self.users is not None
        attempt = f"{peer} {name}"
        if self.failures.exceeded(attempt, self.clock()):
            raise SignInLimitError(f"too many wrong tokens for {name!r}; wait a minute")
        identity = self.users.signed_in(name, token)
        if identity is None:
            self.failures.allows(attempt, self.clock())
        return identity

    def origin(self, request: Request) -> str:
        return self.public_origin or f"{request.url.scheme}://{request.headers.get('host', '')}"


def host_name(host: str) -> str:
    """The name of a Host header without its port: `[::1]:8080` and `[::1]` are `::1`."""
    if host.startswith("["):
        return host[1:].partition("]")[0].lower()
    return host.partition(":")[0].lower()


def basic_credentials(authorization: str) -> tuple[str, str]:
    """The name and token of a `Basic` Authorization header; empty ones if it is not that."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return "", ""
    try:
        name, _, token = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    return name, token


def identity_of(request: Request) -> Identity | None:
    """Who the door let in (`None`: nobody signed in)."""
    found: Identity | None = request.scope.get("state", {}).get("identity")
    return found


def csrf_refusal(request: Request, form: dict[str, str]) -> Response | None:
    """A form without the signed-in user's CSRF token is refused."""
    identity = identity_of(request)
    sent = form.get("csrf", "")
    expected = b"" if identity is None or identity.csrf is None else identity.csrf.encode()
    if not expected or not hmac.compare_digest(sent.encode(), expected):
        return _refused(request, 403, "the form has no valid CSRF token; reload the page and retry")
    return None


class Door:
    """ASGI middleware applying the rules of the module docstring."""

    def __init__(self, app: ASGIApp, config: DoorConfig) -> None:
        self._app = app
        self._config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PROBES:
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        refusal, identity = self._check(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        scope.setdefault("state", {})["identity"] = identity
        await self._app(scope, receive, send)

    def _check(self, request: Request) -> tuple[Response | None, Identity | None]:
        config = self._config
        host = request.headers.get("host", "")
        if host_name(host) not in config.hosts:
            return _refused(request, 400, f"this console does not answer Host {host!r}"), None
        try:
            identity = config.who(request)
        except IdentityRefusedError as error:
            return _refused(request, 403, str(error)), None
        except SignInLimitError as error:
            return _refused(request, 429, str(error)), None
        if request.method in _SAFE:
            if config.require_login and identity is None and request.url.path != "/login":
                return _sign_in_first(request), None
            return None, identity
        return self._state_change_refusal(request, identity), identity

    def _state_change_refusal(self, request: Request, identity: Identity | None) -> Response | None:
        config = self._config
        if not config.knows_anyone:
            return _refused(
                request,
                403,
                "the console is read-only; start it with --users-file or --trusted-proxies to "
                "act or request audits",
            )
        length = request.headers.get("content-length")
        if "transfer-encoding" in request.headers:
            # The server reads a chunked body whatever Content-Length says: the cap would be
            # the sender's word. Browsers and scripts send forms and JSON with a length.
            return _refused(request, 411, "send the body with Content-Length, not chunked")
        if length is None or not length.isdigit():
            return _refused(request, 411, "send Content-Length with the request")
        if int(length) > MAX_BODY_BYTES:
            return _refused(request, 413, f"the body is over {MAX_BODY_BYTES} bytes")
        fetch_site = request.headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return _refused(request, 403, f"refused: a {fetch_site} request")
        origin = request.headers.get("origin")
        if origin is not None and origin != config.origin(request):
            return _refused(request, 403, f"refused: posted from {origin}")
        if _is_api(request) and not request.headers.get(API_CLIENT_HEADER):
            return _refused(request, 403, f"send the {API_CLIENT_HEADER} header with API posts")
        if request.url.path in _OPEN_POSTS:
            # Sign-ins are counted per address: guessing tokens is slowed like acting.
            peer = request.client.host if request.client else "?"
            sender = f"sign-in from {peer}"
        elif identity is None:
            return _sign_in_first(request)
        else:
            sender = identity.user
        if not config.rate.allows(sender, config.clock()):
            return _refused(
                request, 429, f"more than {config.rate.per_minute} requests this minute"
            )
        return None


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _refused(request: Request, status: int, message: str) -> Response:
    body: Any = {"error": message}
    return JSONResponse(body, status) if _is_api(request) else _problem_page(message, status)


def _problem_page(message: str, status: int) -> Response:
    page = f'<!doctype html><title>Kairos</title><p id="problem">{escape(message, quote=False)}</p>'
    return Response(page, status, media_type="text/html")


def _sign_in_first(request: Request) -> Response:
    if _is_api(request):
        return JSONResponse(
            {"error": "who are you? send your name and token (HTTP Basic)"},
            401,
            headers={"WWW-Authenticate": 'Basic realm="Kairos console", charset="UTF-8"'},
        )
    if request.method not in _SAFE:
        return _problem_page("sign in first, at /login", 401)
    return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
