"""A team's secrets: files `<secrets root>/<team>/<name>`, read when its job runs, never inlined.

A job names the secrets it needs (`ShellJob.secrets`, `HttpJob.secret_headers`); the run request
carries only those names, so a secret's value is never in a topic, an event or the store. The
executor resolves them at run time for the run's owner only: a team can name no file outside its
own directory (`..`, `/`, or a symlink pointing out are refused), and a run without an owner has
no secrets. What a job prints may contain a value it was given; `scrub` blanks the values out of
any text that leaves the attempt (the failure reason every team reads in the run events).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from kairos.core.job_kinds import SECRET_NAME_PATTERN
from kairos.services.executor.jobs import JobFailedError

SCRUBBED = "[secret]"
MIN_SCRUBBED_LENGTH = 4
"""Shorter values are not blanked: replacing every `1` or `on` of an output would hide the output
and tell a reader the value all the same."""
_SAFE_NAME = re.compile(SECRET_NAME_PATTERN)


class SecretUnavailableError(JobFailedError):
    """A secret a job names cannot be given to it; the attempt fails with this reason."""


def resolve_secrets(
    secrets_root: Path | None, owner: str | None, names: Mapping[str, str]
) -> dict[str, str]:
    """`names` (what each is for, an env variable or a header → secret name) with each secret's
    value instead of its name; `SecretUnavailableError` naming the first that cannot be read."""
    return {
        purpose: _read(secret_path(secrets_root, owner, name, purpose), name, purpose)
        for purpose, name in names.items()
    }


def secret_path(secrets_root: Path | None, owner: str | None, name: str, purpose: str) -> Path:
    """The file holding `owner`'s secret `name`, symlinks resolved, checked to lie inside the
    owner's directory of `secrets_root`."""
    where = f"secret {name!r} (for {purpose})"
    if secrets_root is None:
        raise SecretUnavailableError(
            f"{where}: this executor has no secrets directory; start it with "
            "--secrets-root DIR holding DIR/<team>/<secret name> files"
        )
    if owner is None:
        raise SecretUnavailableError(
            f"{where}: the schedule has no owner, and secrets belong to a team; "
            "set the schedule's owner"
        )
    for what, text in (("secret name", name), ("owner", owner)):
        if not _SAFE_NAME.fullmatch(text):
            raise SecretUnavailableError(
                f"{where}: {what} {text!r} is not a plain file name "
                "(letters, digits, '_', '.', '-', not starting with '.')"
            )
    # The team's directory itself must be no link: one to another team's would share it.
    team_directory = secrets_root.resolve() / owner
    path = (team_directory / name).resolve()
    if team_directory.resolve() != team_directory or not path.is_relative_to(team_directory):
        raise SecretUnavailableError(
            f"{where}: {secrets_root / owner / name} resolves outside team {owner!r}'s "
            "secrets directory; a team's secrets must be files of its own directory"
        )
    return path


def _read(path: Path, name: str, purpose: str) -> str:
    where = f"secret {name!r} (for {purpose})"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SecretUnavailableError(
            f"{where}: the team has no such secret; create {path}"
        ) from None
    except OSError as error:
        raise SecretUnavailableError(f"{where}: {path} cannot be read: {error.strerror}") from None
    try:
        value = raw.decode()
    except UnicodeDecodeError:
        raise SecretUnavailableError(f"{where}: {path} is not UTF-8 text") from None
    # Files written by `echo` or an editor end with one newline that is not part of the value.
    value = value.removesuffix("\n")
    if "\0" in value:
        raise SecretUnavailableError(f"{where}: {path} holds a NUL byte, which no variable can")
    return value


def scrub(text: str, values: Iterable[str]) -> str:
    """`text` with every value of at least `MIN_SCRUBBED_LENGTH` characters replaced by
    `[secret]`, longest first so that a value containing another is blanked whole."""
    for value in sorted(
        (v for v in set(values) if len(v) >= MIN_SCRUBBED_LENGTH), key=len, reverse=True
    ):
        text = text.replace(value, SCRUBBED)
    return text


def scrub_cut_start(text: str, values: Iterable[str]) -> str:
    """`scrub`, and also a value's end at the very start of `text`: the tail of an output cut
    in the middle of a value would otherwise show its last characters."""
    values = list(values)
    text = scrub(text, values)
    for value in values:
        for start in range(1, len(value) - MIN_SCRUBBED_LENGTH + 1):
            if text.startswith(value[start:]):
                return SCRUBBED + text[len(value) - start :]
    return text
