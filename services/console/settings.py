"""How one console process runs: one frozen model, filled at the CLI edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from kairos.services.console.identity import Network, proxy_networks
from kairos.services.settings_fields import ServiceSettings, Setting

DEFAULT_LISTEN = "127.0.0.1:8080"


def host_list(text: str) -> tuple[str, ...]:
    """`kairos.example.com,console.internal`: host names (no port, no scheme)."""
    hosts = tuple(host.strip().lower() for host in text.split(",") if host.strip())
    bad = [host for host in hosts if "/" in host or ":" in host.strip("[]")]
    if not hosts or bad:
        raise ValueError(f"{text!r}: list host names without scheme or port, e.g. kairos.internal")
    return hosts


def origin_of(text: str) -> str:
    """`https://kairos.example.com` (a port if not the scheme's): the address browsers use."""
    scheme, sep, rest = text.rstrip("/").partition("://")
    if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
        raise ValueError(f"{text!r}: write scheme://host[:port], e.g. https://kairos.example.com")
    return f"{scheme}://{rest.lower()}"


def listen_address(text: str) -> tuple[str, int]:
    """`host:port` (a bracketed IPv6 host too) as a host and a port; raises `ValueError`."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r}: write host:port, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]"), int(port)


class ConsoleSettings(ServiceSettings):
    """How one console runs; `kairos console` takes each field as an option."""

    state_dir: Path
    """Where the console keeps its view of the topics (rebuilt from them if deleted)."""
    listen: Annotated[
        tuple[str, int],
        Setting(env="KAIROS_CONSOLE_LISTEN", parse=listen_address, metavar="HOST:PORT"),
    ] = listen_address(DEFAULT_LISTEN)
    """host:port to serve on (default 127.0.0.1:8080); port 0 takes a free one (logged at
    start)."""
    group_id: Annotated[str | None, Setting(env="KAIROS_TICKER_GROUP")] = None
    """Consumer group of the tickers; default: the deployment's, <topic prefix>tickers."""
    view_url: Annotated[str | None, Setting(env="KAIROS_CONSOLE_VIEW_URL")] = None
    """postgresql://user@host:5432/db for the view; default: SQLite in --state-dir."""
    users_file: Annotated[Path | None, Setting(env="KAIROS_CONSOLE_USERS_FILE")] = None
    """name:token:team,team lines of who may sign in with a token (chmod 600), and their
    teams; without it or --trusted-proxies the console is read-only."""
    trusted_proxies: Annotated[
        frozenset[Network], Setting(parse=proxy_networks, metavar="ADDRESSES")
    ] = frozenset()
    """Addresses (or networks) of the authenticating reverse proxy whose user and groups
    headers the console takes; the headers from any other address are refused."""
    proxy_user_header: str = "X-Forwarded-User"
    """The header the trusted proxy names the user in (oauth2-proxy: X-Forwarded-User)."""
    proxy_groups_header: str = "X-Forwarded-Groups"
    """The header the trusted proxy lists the user's groups in, comma-separated."""
    proxy_group_prefix: str = ""
    """Groups naming a team start with it (kairos-: group kairos-payments is team payments)."""
    team_keys: Path | None = None
    """A directory of <team>.key signing keys, one per team the console acts for (each one
    of the team's registered keys); without it actions are published unsigned."""
    require_login: bool = False
    """Every page and API read needs a signed-in user, not only actions and audits."""
    allowed_hosts: Annotated[tuple[str, ...], Setting(parse=host_list, metavar="HOSTS")] = ()
    """Host header names the console answers (besides localhost and --public-origin's host);
    any other Host gets 400, so a rebound DNS name cannot read it."""
    public_origin: Annotated[str | None, Setting(parse=origin_of)] = None
    """scheme://host[:port] browsers reach the console at, behind a TLS-terminating proxy."""
    session_lifetime_s: int = Field(default=8 * 3600, ge=60)
    """How long a browser's sign-in lasts, in seconds."""
    session_secret_file: Path | None = None
    """A file of at least 32 secret bytes shared by consoles behind one address; default: a
    new secret at each start (signing in again after a restart)."""
    posts_per_minute: int = Field(default=30, ge=1)
    """Actions and audit requests one user may make a minute; more get 429."""
