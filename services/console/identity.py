"""Who sends a request to the console: a user of the users file, a session the console issued,
or a user an authenticating reverse proxy vouches for; and the teams they belong to.

Three sources, each refused where it cannot be trusted:
- **The users file**: `name:token:team,team` lines, readable by the console's user only. API
  clients send the name and token with HTTP Basic on every request; a browser sends them once,
  to the login form, and gets a session.
- **Sessions**: a cookie holding the user, their teams, an expiry and a CSRF nonce, signed with
  the console's session secret (HMAC-SHA256). The browser keeps it for the session's lifetime at
  most; the console keeps nothing, so any console sharing the secret takes it.
- **A trusted proxy** (oauth2-proxy style single sign-on): the user and groups headers are taken
  only from a request whose peer is one of the configured proxy addresses; the same headers from
  any other address are refused, never ignored, so a misrouted request is seen.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kairos.core.errors import KairosError
from kairos.core.ownership import TEAM_NAME

SHORTEST_TOKEN = 16
SESSION_COOKIE = "kairos_session"
SECRET_BYTES = 32


class UsersFileError(KairosError):
    """The users file cannot be used; the message names the line or the fix."""


class IdentityRefusedError(KairosError):
    """A request claims an identity from where the console does not take it."""


@dataclass(frozen=True)
class Identity:
    """Someone the console knows: their name, their teams, and how they proved it."""

    user: str
    teams: frozenset[str]
    via: str
    """`token`, `session` or `proxy`."""
    csrf: str | None = None
    """The session's CSRF nonce: forms posted in this session carry it."""

    def shown(self) -> str:
        teams = ", ".join(sorted(self.teams)) or "no team"
        return f"{self.user} ({teams})"


@dataclass(frozen=True)
class UserEntry:
    token: str
    teams: frozenset[str]


def _user_line(path: Path, number: int, line: str) -> tuple[str, UserEntry]:
    name, _, rest = line.strip().partition(":")
    token, _, team_list = rest.partition(":")
    teams = frozenset(team.strip() for team in team_list.split(",") if team.strip())
    bad_team = next((team for team in sorted(teams) if not TEAM_NAME.fullmatch(team)), None)
    if not name or len(token) < SHORTEST_TOKEN or bad_team is not None:
        problem = f"team {bad_team!r} is not a team name; " if bad_team else ""
        raise UsersFileError(
            f"--users-file {path} line {number}: {problem}write name:token:team,team with a "
            f"token of at least {SHORTEST_TOKEN} characters (e.g. from `openssl rand -hex 16`)"
        )
    return name, UserEntry(token, teams)


@dataclass(frozen=True)
class Users:
    """The users file: who may sign in with a token, and their teams."""

    entries: dict[str, UserEntry]

    @classmethod
    def load(cls, path: Path) -> Users:
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as error:
            raise UsersFileError(f"--users-file {path}: {error.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsersFileError(
                f"--users-file {path} is readable by other users; `chmod 600 {path}`"
            )
        entries: dict[str, UserEntry] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, entry = _user_line(path, number, line)
            if name in entries:
                raise UsersFileError(f"--users-file {path} line {number}: {name!r} again")
            entries[name] = entry
        if not entries:
            raise UsersFileError(f"--users-file {path} names nobody; add a name:token:team line")
        return cls(entries)

    def signed_in(self, name: str, token: str) -> Identity | None:
        known = self.entries.get(name)
        # Compared whatever the name, in constant time: neither names nor tokens leak by timing.
        matches = hmac.compare_digest(token.encode(), (known.token if known else "\0").encode())
        return Identity(name, known.teams, "token") if known is not None and matches else None


@dataclass(frozen=True)
class Sessions:
    """Signed session cookies: nothing is stored, a cookie proves itself until it expires."""

    secret: bytes
    lifetime_s: int

    @classmethod
    def with_secret_file(cls, path: Path | None, lifetime_s: int) -> Sessions:
        """The secret from `path` (shared by consoles behind one address), else a new one:
        sessions then end when the console restarts."""
        if path is None:
            return cls(secrets.token_bytes(SECRET_BYTES), lifetime_s)
        try:
            secret = path.read_bytes().strip()
        except OSError as error:
            raise UsersFileError(f"--session-secret-file {path}: {error.strerror}") from None
        if len(secret) < SECRET_BYTES:
            raise UsersFileError(
                f"--session-secret-file {path} holds {len(secret)} bytes; write at least "
                f"{SECRET_BYTES} (e.g. `openssl rand -hex 32 > {path}`)"
            )
        return cls(secret, lifetime_s)

    def issue(self, identity: Identity, token: str, now_s: int) -> str:
        """A cookie value for `identity`, signed in with `token`, valid for the session's
        lifetime from `now_s`. It names the token by a fingerprint, so changing a user's token
        in the users file ends their sessions."""
        payload = {
            "u": identity.user,
            "x": now_s + self.lifetime_s,
            "c": secrets.token_urlsafe(18),
            "f": self.fingerprint(token),
        }
        body = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
        return f"{body}.{self._mac(_SESSION, body)}"

    def read(self, cookie: str | None, users: Users | None, now_s: int) -> Identity | None:
        """Who the cookie proves, with the teams the users file gives them now; `None` when it
        is absent, forged, expired, or its user or token is no longer in the file."""
        body, _, mac = (cookie or "").partition(".")
        expected = self._mac(_SESSION, body)
        if not body or not hmac.compare_digest(mac.encode(), expected.encode()):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body))
            user, expires = str(payload["u"]), int(payload["x"])
            nonce, fingerprint = str(payload["c"]), str(payload["f"])
        except (ValueError, KeyError, TypeError):
            return None
        entry = None if users is None else users.entries.get(user)
        if expires <= now_s or entry is None or fingerprint != self.fingerprint(entry.token):
            return None
        return Identity(user, entry.teams, "session", nonce)

    def csrf_token(self, identity: Identity) -> str:
        """The token forms carry: the session's nonce, else one derived from the user's name."""
        return identity.csrf or self._mac(_CSRF, f"{identity.via}:{identity.user}")

    def fingerprint(self, token: str) -> str:
        return self._mac(_FINGERPRINT, token)[:32]

    def _mac(self, purpose: bytes, text: str) -> str:
        # One key per purpose: a value signed for one use never verifies for another.
        key = hmac.new(self.secret, purpose, hashlib.sha256).digest()
        return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


_SESSION, _CSRF, _FINGERPRINT = b"kairos-session", b"kairos-csrf", b"kairos-token-fingerprint"


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(text: str) -> frozenset[Network]:
    """`10.0.0.5,10.1.0.0/16`: the proxies' addresses; raises `ValueError` naming the entry."""
    networks = set()
    for entry in filter(None, (part.strip() for part in text.split(","))):
        try:
            networks.add(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an address or a network, e.g. 10.0.0.5") from None
    return frozenset(networks)


@dataclass(frozen=True)
class TrustedProxy:
    """An authenticating reverse proxy: where its requests come from and what it sends."""

    networks: frozenset[Network]
    user_header: str = "X-Forwarded-User"
    groups_header: str = "X-Forwarded-Groups"
    group_prefix: str = ""
    """Groups that name a team start with it (`kairos-`): `kairos-payments` is team payments."""

    def identity(self, peer: str | None, users: list[str], groups: list[str]) -> Identity | None:
        """The user the proxy vouches for, from the values of its user and groups headers;
        `None` when neither is sent. Raises `IdentityRefusedError` for identity headers from an
        address that is not a proxy, or sent twice (a proxy that appends rather than replaces
        would let the client's own value through)."""
        if not users and not groups:
            return None
        if not self._is_proxy(peer):
            raise IdentityRefusedError(
                f"{self.user_header} and {self.groups_header} are taken only from the console's "
                f"trusted proxies (--trusted-proxies), not from {peer}"
            )
        if len(users) > 1 or len(groups) > 1:
            raise IdentityRefusedError("the proxy sent an identity header twice; send it once")
        if not users or not users[0]:
            raise IdentityRefusedError(f"the proxy sent {self.groups_header} without a user")
        return Identity(users[0], self._teams(groups[0] if groups else ""), "proxy")

    def _is_proxy(self, peer: str | None) -> bool:
        try:
            address = ipaddress.ip_address(peer or "")
        except ValueError:
            return False
        return any(address in network for network in self.networks)

    def _teams(self, groups: str) -> frozenset[str]:
        named = (group.strip() for group in groups.split(","))
        teams = (g[len(self.group_prefix) :] for g in named if g.startswith(self.group_prefix))
        return frozenset(team for team in teams if TEAM_NAME.fullmatch(team))


def teams_acting_for(identity: Identity, owner: str | None, admins: Iterable[str]) -> list[str]:
    """The teams `identity` may act as on a schedule of `owner`, the owner's first: a user acts
    on their own teams' schedules, and an administrators' team's user on every schedule."""
    own = [owner] if owner is not None and owner in identity.teams else []
    return own + sorted(identity.teams.intersection(admins) - set(own))
