"""Signed schedule and calendar changes: the one place that owns the signature's headers and bytes.

A team signs each record it publishes on the schedules and calendars topics with its Ed25519 private
key; when the deployment enforces ownership, the ticker (and, for calendars, every reader:
`kairos.streams.readers.calendar_ownership`) verifies the signature against the team's public keys
(registered on the admin-only teams topic) before it takes the change. The signature rides in three
headers, so any Kafka client in any language can sign (docs/teams.md has the layout and a test
vector):

- `kairos-team`: the team's name, UTF-8.
- `kairos-signed-at`: when it was signed, milliseconds since the epoch as ASCII digits.
- `kairos-signature`: the 64-byte Ed25519 signature of `signed_bytes(...)`.

The signed bytes bind the topic (no replay into another deployment), the team, the instant, the
key and the value (a tombstone's absent value included). A replay of a captured record is
refused by its age: both topics stamp each record with the broker's append time, which no
producer sets, and a record appended more than `max_age_ms` away from its signing instant is
refused.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kairos.core.errors import KairosError
from kairos.core.ownership import TEAM_NAME

TEAM_HEADER = "kairos-team"
SIGNED_AT_HEADER = "kairos-signed-at"
SIGNATURE_HEADER = "kairos-signature"
SIGNATURE_CONTEXT = b"kairos-signed-record-v1\n"
"""Leads the signed bytes: a signature made for anything else never verifies as a record's."""

_LENGTH = struct.Struct(">I")
_ABSENT = b"\xff\xff\xff\xff"
_TEAM_LINE = "kairos-team:"

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]


def signed_bytes(
    topic: str, team: str, signed_at_ms: int, key: bytes | None, value: bytes | None
) -> bytes:
    """What a record's signature signs: each part length-prefixed (4 bytes, big-endian), an
    absent key or value as the length 0xFFFFFFFF with nothing after it."""
    parts = [topic.encode(), team.encode(), str(signed_at_ms).encode(), key, value]
    out = [SIGNATURE_CONTEXT]
    for part in parts:
        out.append(_ABSENT if part is None else _LENGTH.pack(len(part)) + part)
    return b"".join(out)


class SigningKeyError(KairosError):
    """A signing key file that cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class Signer:
    """A team's private key: signs the records the team publishes."""

    team: str
    private_key: Ed25519PrivateKey

    def headers(
        self, topic: str, key: bytes | None, value: bytes | None, signed_at_ms: int
    ) -> list[tuple[str, str | bytes | None]]:
        signature = self.private_key.sign(signed_bytes(topic, self.team, signed_at_ms, key, value))
        return [
            (TEAM_HEADER, self.team.encode()),
            (SIGNED_AT_HEADER, str(signed_at_ms).encode()),
            (SIGNATURE_HEADER, signature),
        ]

    def public_key(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )


def new_signing_key(team: str) -> tuple[str, Signer]:
    """A new key pair for `team`: the key file's text, and its signer."""
    if not TEAM_NAME.fullmatch(team):
        raise SigningKeyError(
            f"team name {team!r}: use lower-case letters, digits and inner hyphens"
        )
    private_key = Ed25519PrivateKey.generate()
    pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    text = (
        f"# The signing key of team {team}: whoever holds it changes the team's schedules.\n"
        f"{_TEAM_LINE} {team}\n{pem}"
    )
    return text, Signer(team, private_key)


def load_signer(path: Path) -> Signer:
    """The signer of a key file `kairos teams keygen` wrote; refused when others may read it."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SigningKeyError(f"cannot read signing key {path}: {error.strerror}") from error
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningKeyError(
            f"signing key {path} may be read by other users (mode {stat.filemode(mode)}): "
            f"anyone who reads it can change the team's schedules; run `chmod 600 {path}`"
        )
    team = next(
        (
            line.removeprefix(_TEAM_LINE).strip()
            for line in text.splitlines()
            if line.startswith(_TEAM_LINE)
        ),
        None,
    )
    if team is None or not TEAM_NAME.fullmatch(team):
        raise SigningKeyError(
            f"signing key {path} has no valid '{_TEAM_LINE} <team>' line: make one with "
            "`kairos teams keygen`"
        )
    try:
        private_key = serialization.load_pem_private_key(
            text[text.index("-----BEGIN") :].encode(), password=None
        )
    except ValueError as error:
        raise SigningKeyError(f"signing key {path} holds no readable private key") from error
    if not isinstance(private_key, Ed25519PrivateKey):
        raise SigningKeyError(f"signing key {path} is not an Ed25519 key")
    return Signer(team, private_key)


def named_team(headers: Headers | None) -> str | None:
    """The team a record's `kairos-team` header names, verified or not; `None` without one.

    What readers show as a change's signing team once a signed ticker took it
    (`kairos.streams.kafka.ownership.Judged.verified_team`): such a ticker refuses every record
    whose named team's signature does not verify."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, raw in pairs:
        if name == TEAM_HEADER and isinstance(raw, bytes):
            return raw.decode(errors="replace")
    return None


@dataclass(frozen=True)
class Refused:
    """Why a record's signature is not accepted; `team` is the registered team that signed it,
    when one did."""

    reason: str
    team: str | None = None


class Verifier:
    """Checks records' signatures against the registered teams' public keys."""

    def __init__(self, public_keys: Mapping[str, tuple[bytes, ...]], max_age_ms: int) -> None:
        self._keys = {
            team: [Ed25519PublicKey.from_public_bytes(raw) for raw in keys]
            for team, keys in public_keys.items()
        }
        self.max_age_ms = max_age_ms

    def signer(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: tuple[int, int],
    ) -> str | Refused:
        """The team whose key signed the record, or why it is not accepted."""
        pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
        found = {name: raw for name, raw in pairs if isinstance(raw, bytes)}
        team_raw, signed_at_raw, signature = (
            found.get(name) for name in (TEAM_HEADER, SIGNED_AT_HEADER, SIGNATURE_HEADER)
        )
        if team_raw is None or signed_at_raw is None or signature is None:
            return Refused(
                "unsigned: this deployment enforces ownership, so every change must carry its "
                "team's signature (publish with --signing-key or KAIROS_SIGNING_KEY; "
                "docs/teams.md)"
            )
        team = team_raw.decode(errors="replace")
        keys = self._keys.get(team)
        if keys is None:
            return Refused(f"signed as team {team!r}, which is not registered (kairos teams list)")
        if not signed_at_raw.isdigit():
            return Refused(f"the {SIGNED_AT_HEADER} header is not a count of milliseconds")
        message = signed_bytes(topic, team, int(signed_at_raw), key, value)
        if not any(_verifies(public, signature, message) for public in keys):
            return Refused(
                f"the signature does not verify with any key of team {team!r}: forged, altered "
                "after signing, or signed with a key the team has not registered"
            )
        return self._fresh(team, int(signed_at_raw), timestamp)

    def _fresh(self, team: str, signed_at_ms: int, timestamp: tuple[int, int]) -> str | Refused:
        kind, appended_ms = timestamp
        if kind != TIMESTAMP_LOG_APPEND_TIME:
            return Refused(
                "its topic does not stamp the broker's append time, so a replayed record "
                "cannot be told from a fresh one: set message.timestamp.type=LogAppendTime on "
                "it (`kairos topics check` names the fix)",
                team,
            )
        apart_ms = abs(appended_ms - signed_at_ms)
        if apart_ms > self.max_age_ms:
            return Refused(
                f"signed {apart_ms / 1000:.0f}s away from when the broker appended it (at most "
                f"{self.max_age_ms / 1000:.0f}s): a replay of an old record, or a publisher that "
                "held it too long; sign each record right before publishing it",
                team,
            )
        return team


def _verifies(public: Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        public.verify(signature, message)
    except InvalidSignature:
        return False
    return True
