"""Who may act from the console: the users file's rules and Basic authentication."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from kairos.services.console.actions import Users, UsersFileError

TOKEN = "0123456789abcdef"


def users_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "users"
    path.write_text(text)
    path.chmod(mode)
    return path


def basic(name: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{token}".encode()).decode()


def test_a_name_and_its_own_token_authenticate_and_nothing_else_does(tmp_path: Path) -> None:
    users = Users.load(users_file(tmp_path, f"# operators\nalice:{TOKEN}\n\nbob:{TOKEN}x\n"))
    assert users.authenticated(basic("alice", TOKEN)) == "alice"
    assert users.authenticated(basic("bob", TOKEN)) is None
    assert users.authenticated(basic("carol", TOKEN)) is None
    assert users.authenticated(f"Bearer {TOKEN}") is None
    assert users.authenticated("Basic !!not-base64") is None
    assert users.authenticated(None) is None


@pytest.mark.parametrize(
    ("text", "mode", "problem"),
    [
        (f"alice:{TOKEN}\n", 0o644, "readable by other users; `chmod 600"),
        ("alice:short\n", 0o600, "line 1: write name:token"),
        (f"alice {TOKEN}\n", 0o600, "line 1: write name:token"),
        (f"alice:{TOKEN}\nalice:{TOKEN}\n", 0o600, "line 2: write name:token, one name once"),
        ("# nobody\n", 0o600, "names nobody"),
    ],
    ids=["readable-by-others", "short-token", "no-colon", "twice", "empty"],
)
def test_a_users_file_that_cannot_be_trusted_is_refused_with_the_fix(
    tmp_path: Path, text: str, mode: int, problem: str
) -> None:
    with pytest.raises(UsersFileError, match=problem.replace("`", ".").replace("(", ".")):
        Users.load(users_file(tmp_path, text, mode))
