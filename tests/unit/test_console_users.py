"""Who the console knows: the users file's rules, Basic authentication, sessions that expire,
and the teams a user acts for."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from kairos.services.console.door import basic_credentials
from kairos.services.console.identity import (
    Identity,
    Sessions,
    Users,
    UsersFileError,
    teams_acting_for,
)

TOKEN = "0123456789abcdef"


def users_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "users"
    path.write_text(text)
    path.chmod(mode)
    return path


def basic(name: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{token}".encode()).decode()


def signed_in(users: Users, authorization: str) -> Identity | None:
    return users.signed_in(*basic_credentials(authorization))


def test_a_name_and_its_own_token_authenticate_and_nothing_else_does(tmp_path: Path) -> None:
    text = f"# operators\nalice:{TOKEN}:payments,ops\n\nbob:{TOKEN}x\n"
    users = Users.load(users_file(tmp_path, text))
    alice = signed_in(users, basic("alice", TOKEN))
    assert alice is not None and (alice.user, alice.teams) == ("alice", {"payments", "ops"})
    bob = signed_in(users, basic("bob", TOKEN + "x"))
    assert bob is not None and bob.teams == frozenset(), "a user of no team acts on nothing"
    assert signed_in(users, basic("bob", TOKEN)) is None
    assert signed_in(users, basic("carol", TOKEN)) is None
    assert signed_in(users, f"Bearer {TOKEN}") is None
    assert signed_in(users, "Basic !!not-base64") is None


@pytest.mark.parametrize(
    ("text", "mode", "problem"),
    [
        (f"alice:{TOKEN}\n", 0o644, "readable by other users; `chmod 600"),
        ("alice:short\n", 0o600, "line 1: write name:token:team,team"),
        (f"alice {TOKEN}\n", 0o600, "line 1: write name:token:team,team"),
        (f"alice:{TOKEN}:Pay_ments\n", 0o600, "line 1: team 'Pay_ments' is not a team name"),
        (f"alice:{TOKEN}\nalice:{TOKEN}\n", 0o600, "line 2: 'alice' again"),
        ("# nobody\n", 0o600, "names nobody"),
    ],
    ids=["readable-by-others", "short-token", "no-colon", "bad-team", "twice", "empty"],
)
def test_a_users_file_that_cannot_be_trusted_is_refused_with_the_fix(
    tmp_path: Path, text: str, mode: int, problem: str
) -> None:
    with pytest.raises(UsersFileError, match=problem.replace("`", ".").replace("(", ".")):
        Users.load(users_file(tmp_path, text, mode))


def test_a_session_proves_its_user_until_it_expires_and_not_once_altered(tmp_path: Path) -> None:
    users = Users.load(users_file(tmp_path, f"alice:{TOKEN}:payments\n"))
    sessions = Sessions(b"k" * 32, lifetime_s=600)
    alice = Identity("alice", frozenset({"payments"}), "token")
    cookie = sessions.issue(alice, TOKEN, now_s=1000)
    read = sessions.read(cookie, users, now_s=1599)
    assert read is not None and (read.user, read.teams) == ("alice", {"payments"})
    assert read.csrf, "a session carries the token its forms must send"
    assert sessions.read(cookie, users, now_s=1600) is None, "expired"
    body, _, mac = cookie.partition(".")
    assert sessions.read(body[:-2] + "xx." + mac, users, now_s=1001) is None, "altered"
    assert Sessions(b"j" * 32, 600).read(cookie, users, 1001) is None, "another console's secret"
    moved = Users.load(users_file(tmp_path, f"alice:{TOKEN}:growth\n"))
    read = sessions.read(cookie, moved, now_s=1001)
    assert read is not None and read.teams == {"growth"}, "the teams the users file gives now"
    rotated = Users.load(users_file(tmp_path, f"alice:{TOKEN}-new:payments\n"))
    assert sessions.read(cookie, rotated, now_s=1001) is None, "a new token ends old sessions"


def test_a_user_acts_as_the_owning_team_first_then_as_an_administrators_team() -> None:
    paula = Identity("paula", frozenset({"payments", "ops"}), "token")
    assert teams_acting_for(paula, "payments", admins={"ops"}) == ["payments", "ops"]
    assert teams_acting_for(paula, "growth", admins={"ops"}) == ["ops"]
    assert teams_acting_for(paula, "growth", admins=set()) == []
    assert teams_acting_for(paula, None, admins=set()) == [], "ownerless: administrators only"
