"""Signed schedule changes: the bytes every language must sign, and what a ticker accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kairos.streams.wire.signing import (
    Refused,
    Signer,
    SigningKeyError,
    Verifier,
    load_signer,
    new_signing_key,
    signed_bytes,
)

TOPIC = "kairos.schedules"
SIGNED_AT = 1_796_236_800_000
APPENDED = (TIMESTAMP_LOG_APPEND_TIME, SIGNED_AT + 40)

# The vector docs/teams.md gives producers in other languages: RFC 8032 Ed25519 with the
# private key 00 01 02 ... 1f, signing a tombstone of `payments-settle`.
VECTOR_SEED = bytes(range(32))
VECTOR_BYTES = bytes.fromhex(
    "6b6169726f732d7369676e65642d7265636f72642d76310a000000106b6169726f732e7363686564756c6573"
    "000000087061796d656e74730000000d313739363233363830303030300000000f7061796d656e74732d7365"
    "74746c65ffffffff"
)
VECTOR_PUBLIC = bytes.fromhex("03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8")
VECTOR_SIGNATURE = bytes.fromhex(
    "eddcd1488766b06dd1dd1997217f1d49576a7305258072aa9c6a23ecc301a0b6"
    "0143189e024ece7f4a268419b2649e2288f41f5bbe11f3fc4f132716a44e550e"
)


def _signer(team: str = "payments") -> Signer:
    return new_signing_key(team)[1]


def _verifier(*signers: Signer, max_age_ms: int = 300_000) -> Verifier:
    return Verifier({s.team: (s.public_key(),) for s in signers}, max_age_ms)


def test_the_documented_vector_signs_and_verifies() -> None:
    signer = Signer("payments", Ed25519PrivateKey.from_private_bytes(VECTOR_SEED))
    message = signed_bytes(TOPIC, "payments", SIGNED_AT, b"payments-settle", None)
    assert message == VECTOR_BYTES
    assert signer.public_key() == VECTOR_PUBLIC
    headers = signer.headers(TOPIC, b"payments-settle", None, SIGNED_AT)
    assert dict(headers)["kairos-signature"] == VECTOR_SIGNATURE
    verifier = Verifier({"payments": (VECTOR_PUBLIC,)}, 300_000)
    assert verifier.signer(TOPIC, b"payments-settle", None, headers, APPENDED) == "payments"


def test_an_absent_value_and_an_empty_one_sign_differently() -> None:
    tombstone = signed_bytes(TOPIC, "t", 1, b"k", None)
    assert tombstone != signed_bytes(TOPIC, "t", 1, b"k", b"")
    assert signed_bytes(TOPIC, "t", 1, b"ab", b"c") != signed_bytes(TOPIC, "t", 1, b"a", b"bc")


def test_a_signed_record_names_its_team() -> None:
    payments = _signer()
    headers = payments.headers(TOPIC, b"id", b"value", SIGNED_AT)
    assert _verifier(payments).signer(TOPIC, b"id", b"value", headers, APPENDED) == "payments"


@pytest.mark.parametrize(
    ("topic", "key", "value"),
    [
        ("staging.schedules", b"id", b"value"),  # replayed into another deployment
        (TOPIC, b"other-id", b"value"),  # moved to another schedule
        (TOPIC, b"id", b"value!"),  # altered after signing
        (TOPIC, b"id", None),  # turned into a tombstone
    ],
)
def test_a_record_altered_after_signing_is_refused(
    topic: str, key: bytes, value: bytes | None
) -> None:
    payments = _signer()
    headers = payments.headers(TOPIC, b"id", b"value", SIGNED_AT)
    refused = _verifier(payments).signer(topic, key, value, headers, APPENDED)
    assert isinstance(refused, Refused) and refused.team is None
    assert "does not verify with any key of team 'payments'" in refused.reason


def test_another_teams_key_under_its_name_is_refused() -> None:
    payments, growth = _signer("payments"), _signer("growth")
    headers = [
        (name, b"payments" if name == "kairos-team" else value)
        for name, value in growth.headers(TOPIC, b"id", b"v", SIGNED_AT)
    ]
    refused = _verifier(payments, growth).signer(TOPIC, b"id", b"v", headers, APPENDED)
    assert isinstance(refused, Refused) and "does not verify" in refused.reason


def test_unsigned_and_unregistered_records_are_refused() -> None:
    payments = _signer()
    verifier = _verifier(payments)
    unsigned = verifier.signer(TOPIC, b"id", b"v", None, APPENDED)
    assert isinstance(unsigned, Refused) and unsigned.reason.startswith("unsigned")
    stranger = _signer("stranger").headers(TOPIC, b"id", b"v", SIGNED_AT)
    unknown = verifier.signer(TOPIC, b"id", b"v", stranger, APPENDED)
    assert isinstance(unknown, Refused) and "not registered" in unknown.reason


def test_a_record_appended_long_after_its_signing_is_a_replay() -> None:
    payments = _signer()
    headers = payments.headers(TOPIC, b"id", b"v", SIGNED_AT)
    verifier = _verifier(payments, max_age_ms=5_000)
    late = (TIMESTAMP_LOG_APPEND_TIME, SIGNED_AT + 5_001)
    refused = verifier.signer(TOPIC, b"id", b"v", headers, late)
    assert isinstance(refused, Refused) and refused.team == "payments"
    assert "away from when the broker appended it" in refused.reason
    on_time = (TIMESTAMP_LOG_APPEND_TIME, SIGNED_AT + 5_000)
    assert verifier.signer(TOPIC, b"id", b"v", headers, on_time) == "payments"


def test_a_producer_stamped_timestamp_cannot_vouch_for_freshness() -> None:
    payments = _signer()
    headers = payments.headers(TOPIC, b"id", b"v", SIGNED_AT)
    stamped = (TIMESTAMP_CREATE_TIME, SIGNED_AT)
    refused = _verifier(payments).signer(TOPIC, b"id", b"v", headers, stamped)
    assert isinstance(refused, Refused) and "LogAppendTime" in refused.reason


def test_key_files_round_trip_and_must_be_private(tmp_path: Path) -> None:
    text, signer = new_signing_key("payments-eu")
    path = tmp_path / "payments.key"
    path.write_text(text)
    path.chmod(0o644)
    with pytest.raises(SigningKeyError, match="chmod 600"):
        load_signer(path)
    path.chmod(0o600)
    loaded = load_signer(path)
    assert (loaded.team, loaded.public_key()) == ("payments-eu", signer.public_key())
    path.write_text("kairos-team: payments\nnot a key\n")
    with pytest.raises(SigningKeyError, match="no readable private key"):
        load_signer(path)
    with pytest.raises(SigningKeyError, match="team name"):
        new_signing_key("Payments EU")
