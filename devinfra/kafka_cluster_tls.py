"""The TLS material of the local secured cluster, made on the fly: a CA and one node certificate.

Kafka reads PEM directly (`ssl.keystore.type=PEM`), so no JKS or PKCS#12 step is needed, and
librdkafka trusts the same CA file. Every node presents the same certificate: one identity,
`CN=kairos-broker`, which the nodes use among themselves (mutual TLS on the inter-broker and
controller listeners) and which is a super user. The CA's private key is never written: nothing
signs a certificate after the start that made it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BROKER_COMMON_NAME = "kairos-broker"
# The principal Kafka derives from the node certificate's subject (the default mapping rule).
BROKER_PRINCIPAL = f"User:CN={BROKER_COMMON_NAME}"
_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class TlsFiles:
    """Where a secured cluster's PEM files live: the CA (public) and the node key and chain."""

    directory: Path

    @property
    def ca_certificate(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def node_keystore(self) -> Path:
        """The node's private key followed by its certificate and the CA: a Kafka PEM keystore."""
        return self.directory / "broker-keystore.pem"

    def exist(self) -> bool:
        return self.ca_certificate.exists() and self.node_keystore.exists()


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    issuer: str,
    public_key: ec.EllipticCurvePublicKey,
    signing_key: ec.EllipticCurvePrivateKey,
    is_ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # A little slack for clocks that disagree by a few minutes.
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if not is_ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(
            # Nodes are servers to their clients and clients of each other.
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    return builder.sign(signing_key, hashes.SHA256())


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)


def make_tls_files(directory: Path) -> TlsFiles:
    """Create a CA and a node certificate for 127.0.0.1/localhost signed by it, in PEM."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("kairos-local-ca", "kairos-local-ca", ca_key.public_key(), ca_key, True)
    node_key = ec.generate_private_key(ec.SECP256R1())
    node = _certificate(
        BROKER_COMMON_NAME, "kairos-local-ca", node_key.public_key(), ca_key, is_ca=False
    )
    pem = serialization.Encoding.PEM
    files.ca_certificate.write_bytes(ca.public_bytes(pem))
    # Kafka's PEM keystore takes an unencrypted PKCS#8 key when no ssl.key.password is set.
    key_pem = node_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write_private(files.node_keystore, key_pem + node.public_bytes(pem) + ca.public_bytes(pem))
    return files
