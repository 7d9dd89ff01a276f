"""Where Kafka settings come from: the properties file, KAIROS_* variables, flags, their order."""

from __future__ import annotations

from pathlib import Path

import pytest

from kairos.cli.connection import (
    ConnectionFlags,
    KafkaSettingsError,
    check_properties,
    property_name,
    read_properties_file,
    resolve,
)
from kairos.streams.kafka.settings import REDACTED, KafkaSettings, redacted


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (
        "KAIROS_BOOTSTRAP_SERVERS",
        "KAIROS_TOPIC_PREFIX",
        "KAIROS_SCHEDULES_PARTITIONS",
        "KAIROS_KAFKA_CONFIG",
        "KAIROS_TIMEOUT",
    ):
        monkeypatch.delenv(variable, raising=False)


def properties_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text, encoding="utf-8")
    return path


def test_variable_names_become_property_names() -> None:
    assert property_name("KAIROS_KAFKA_SASL_MECHANISM") == "sasl.mechanism"
    assert property_name("KAIROS_KAFKA_SSL_KEYSTORE_PASSWORD") == "ssl.keystore.password"
    # The few librdkafka names with an underscore keep it.
    assert property_name("KAIROS_KAFKA_LOG_LEVEL") == "log_level"
    assert property_name("KAIROS_KAFKA_ENABLED_EVENTS") == "enabled_events"


def test_the_file_is_key_value_lines_with_comments(tmp_path: Path) -> None:
    path = properties_file(
        tmp_path,
        "# the cluster\n\nsecurity.protocol = SASL_SSL\n! java-style comment\n"
        "sasl.jaas.config=a=b\n",
    )
    assert read_properties_file(path, "--kafka-config") == {
        "security.protocol": ("SASL_SSL", 3),
        # Only the first `=` separates: values may hold more.
        "sasl.jaas.config": ("a=b", 5),
    }


def test_a_bad_file_is_an_error_naming_file_and_line_never_the_value(tmp_path: Path) -> None:
    path = properties_file(tmp_path, "security.protocol=SSL\nsasl.password hunter2\n")
    with pytest.raises(KafkaSettingsError) as bad_line:
        read_properties_file(path, "--kafka-config")
    assert str(bad_line.value).startswith(f"{path}:2: not a property line (expected key=value")
    assert "hunter2" not in str(bad_line.value)
    with pytest.raises(KafkaSettingsError, match="does not exist"):
        read_properties_file(tmp_path / "missing.properties", "KAIROS_KAFKA_CONFIG")
    with pytest.raises(KafkaSettingsError, match="cannot be read"):
        read_properties_file(tmp_path, "--kafka-config")


def test_precedence_defaults_file_variables_environment_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = properties_file(
        tmp_path,
        "bootstrap.servers=file:9092\nclient.rack=file-rack\nsocket.timeout.ms=1000\n",
    )
    monkeypatch.setenv("KAIROS_KAFKA_CONFIG", str(path))
    from_file = resolve(ConnectionFlags())
    assert from_file.settings.bootstrap_servers == "file:9092"
    assert from_file.bootstrap_source == f"bootstrap.servers in {path}:1"
    assert from_file.settings.properties == {
        "client.rack": "file-rack",
        "socket.timeout.ms": "1000",
    }
    assert from_file.settings.topic_prefix == "kairos."

    monkeypatch.setenv("KAIROS_KAFKA_CLIENT_RACK", "env-rack")
    monkeypatch.setenv("KAIROS_BOOTSTRAP_SERVERS", "env:9092")
    monkeypatch.setenv("KAIROS_TOPIC_PREFIX", "staging.")
    from_environment = resolve(ConnectionFlags())
    assert from_environment.settings.properties["client.rack"] == "env-rack"
    assert from_environment.source_of("client.rack") == "KAIROS_KAFKA_CLIENT_RACK"
    assert from_environment.source_of("socket.timeout.ms") == f"{path}:3"
    assert from_environment.settings.bootstrap_servers == "env:9092"
    assert from_environment.bootstrap_source == "KAIROS_BOOTSTRAP_SERVERS"

    flagged = resolve(ConnectionFlags(bootstrap_servers="flag:9092", topic_prefix="prod."))
    assert (flagged.settings.bootstrap_servers, flagged.bootstrap_source) == (
        "flag:9092",
        "--bootstrap-servers",
    )
    assert flagged.settings.topic_prefix == "prod."


def test_nothing_given_is_the_default_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    nothing = resolve(ConnectionFlags())
    assert nothing.settings.bootstrap_servers == "127.0.0.1:9092"
    assert nothing.bootstrap_source.startswith("the default")
    assert nothing.timeout_s == 10.0
    monkeypatch.setenv("KAIROS_SCHEDULES_PARTITIONS", "zero")
    with pytest.raises(KafkaSettingsError, match="KAIROS_SCHEDULES_PARTITIONS"):
        resolve(ConnectionFlags())


def test_a_refused_property_names_itself_and_where_it_was_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = properties_file(tmp_path, "# ok\nsecurity.protocl=SSL\n")
    with pytest.raises(KafkaSettingsError) as unknown:
        check_properties(resolve(ConnectionFlags(kafka_config=path)))
    assert str(unknown.value).startswith(
        f"Kafka property security.protocl (set in {path}:2) was refused: "
        'No such configuration property: "security.protocl"'
    )
    monkeypatch.setenv("KAIROS_KAFKA_ACKS", "most")
    with pytest.raises(KafkaSettingsError, match=r"\(set in KAIROS_KAFKA_ACKS\) was refused"):
        check_properties(resolve(ConnectionFlags()))


def test_every_client_gets_the_properties_and_a_log_shows_no_secret() -> None:
    settings = KafkaSettings(
        bootstrap_servers="b:9092",
        properties={"security.protocol": "SASL_SSL", "sasl.password": "hunter2"},
    )
    configs = [
        settings.client_config(),
        settings.producer_config(),
        settings.consumer_config(),
        settings.group_member_config("g", "i", 3000),
    ]
    assert all(c["sasl.password"] == "hunter2" for c in configs)
    assert settings.producer_config()["acks"] == "all"
    # What Kairos's correctness depends on is set over the user's properties.
    pinned = KafkaSettings(bootstrap_servers="b:9092", properties={"isolation.level": "x"})
    assert pinned.group_member_config("g", "i", 3000)["isolation.level"] == "read_committed"
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)
    assert redacted(settings.properties)["sasl.password"] == REDACTED
    assert redacted({"sasl.oauthbearer.client.secret": "s", "ssl.key.pem": "k"}) == {
        "sasl.oauthbearer.client.secret": REDACTED,
        "ssl.key.pem": REDACTED,
    }
    assert settings.deployment_id("tickers") == "kairos.tickers"
