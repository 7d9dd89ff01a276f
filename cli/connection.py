"""Where every command's Kafka settings come from: the one place the KAIROS_* environment and
the `--kafka-config` file are read, merged with the root options in a documented order.

Precedence, lowest first: Kairos's defaults < the `--kafka-config` file (or
`KAIROS_KAFKA_CONFIG`) < `KAIROS_KAFKA_<PROPERTY>` variables < `KAIROS_BOOTSTRAP_SERVERS`,
`KAIROS_TOPIC_PREFIX`, … < the root options (`kairos --bootstrap-servers …`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from kairos.streams.kafka.settings import KafkaSettings, is_secret, redacted

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TOPIC_PREFIX = "kairos."
DEFAULT_SCHEDULES_PARTITIONS = 12
DEFAULT_TIMEOUT_S = 10.0

PROPERTY_PREFIX = "KAIROS_KAFKA_"
# KAIROS_KAFKA_* variables that are Kairos's own, not librdkafka properties.
NOT_PROPERTIES = frozenset({"KAIROS_KAFKA_CONFIG", "KAIROS_KAFKA_DATA_DIR"})
# The librdkafka properties settable as strings whose names hold an underscore (found by trying
# every such name in librdkafka 2.16's symbols); every other name's underscores are dots.
UNDERSCORED_PROPERTIES = frozenset({"log_level", "enabled_events", "enable_sasl_queue"})

# librdkafka names some properties by their canonical name when it refuses a value given under
# the common alias (`acks=x` -> "request.required.acks"); errors name where the alias was set.
ALIASES = {
    "request.required.acks": "acks",
    "queue.buffering.max.ms": "linger.ms",
    "message.send.max.retries": "retries",
    "max.in.flight.requests.per.connection": "max.in.flight",
}


class KafkaSettingsError(Exception):
    """Settings that cannot be used; the message says what was wrong and how to fix it."""


def property_name(variable: str) -> str:
    """`KAIROS_KAFKA_SASL_MECHANISM` -> `sasl.mechanism`."""
    lowered = variable.removeprefix(PROPERTY_PREFIX).lower()
    return lowered if lowered in UNDERSCORED_PROPERTIES else lowered.replace("_", ".")


class _PropertyVariables(PydanticBaseSettingsSource):
    """Every `KAIROS_KAFKA_<PROPERTY>` variable, as {property: value}."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found = {
            variable: value
            for variable, value in os.environ.items()
            if variable.startswith(PROPERTY_PREFIX) and variable not in NOT_PROPERTIES
        }
        return {"kafka_variables": found} if found else {}


class KairosEnvironment(BaseSettings):
    """The KAIROS_* variables of the Kafka connection."""

    model_config = SettingsConfigDict(env_prefix="KAIROS_", extra="ignore")

    bootstrap_servers: str | None = None
    topic_prefix: str | None = None
    schedules_partitions: int | None = Field(default=None, ge=1)
    kafka_config: Path | None = None
    signing_key: Path | None = None
    timeout: float | None = Field(default=None, gt=0)
    kafka_variables: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _PropertyVariables(settings_cls)


@dataclass(frozen=True)
class ConnectionFlags:
    """The root options as given on the command line (`None`: not given)."""

    bootstrap_servers: str | None = None
    kafka_config: Path | None = None
    topic_prefix: str | None = None
    schedules_partitions: int | None = None
    timeout: float | None = None
    signing_key: Path | None = None


@dataclass(frozen=True)
class Connection:
    """Resolved settings, with where each value came from for error messages."""

    settings: KafkaSettings
    bootstrap_source: str
    timeout_s: float
    property_sources: dict[str, str] = field(default_factory=dict)

    def source_of(self, name: str) -> str:
        for given in (name, ALIASES.get(name, name)):
            if given in self.property_sources:
                return self.property_sources[given]
        return ", ".join(sorted(set(self.property_sources.values()))) or "Kairos's defaults"

    def without_secrets(self, text: str) -> str:
        """The text with every secret property's value replaced: librdkafka may quote one."""
        for name, value in self.settings.properties.items():
            if is_secret(name) and value:
                text = text.replace(value, "[redacted]")
        return text

    def describe(self) -> str:
        """One log line: where this process connects and with which properties, no secret."""
        return (
            f"kafka {self.settings.bootstrap_servers} (from {self.bootstrap_source}), "
            f"topic prefix {self.settings.topic_prefix!r}, "
            f"properties {redacted(self.settings.properties)}"
        )


def read_properties_file(path: Path, origin: str) -> dict[str, tuple[str, int]]:
    """A librdkafka/Java properties file: `key=value` lines, `#` or `!` comments, blank lines.

    Returns {property: (value, line)}. Errors name the file and the line, never its value.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise KafkaSettingsError(
            f"the Kafka properties file {path} ({origin}) does not exist; "
            "give the path of a key=value file, or drop the option"
        ) from error
    except (OSError, UnicodeDecodeError) as error:
        problem = error.strerror if isinstance(error, OSError) else "it is not UTF-8 text"
        raise KafkaSettingsError(
            f"the Kafka properties file {path} ({origin}) cannot be read: {problem}"
        ) from error
    properties: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise KafkaSettingsError(
                f"{path}:{number}: not a property line (expected key=value, e.g. "
                "security.protocol=SASL_SSL; comments start with #)"
            )
        properties[name.strip()] = (value.strip(), number)
    return properties


def _environment() -> KairosEnvironment:
    try:
        return KairosEnvironment()
    except ValidationError as invalid:
        problems = "; ".join(
            f"KAIROS_{'_'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            for error in invalid.errors(include_url=False)
        )
        raise KafkaSettingsError(f"bad environment: {problems}") from invalid


def _first(*values: Any) -> Any:
    """The first value given (the last is a default)."""
    return next(value for value in values if value is not None)


def _config_file(
    flags: ConnectionFlags, environment: KairosEnvironment
) -> dict[str, tuple[str, str]]:
    """{property: (value, where it was set)} of the properties file, if one is named."""
    if flags.kafka_config is not None:
        path, origin = flags.kafka_config, "--kafka-config"
    elif environment.kafka_config is not None:
        path, origin = environment.kafka_config, "KAIROS_KAFKA_CONFIG"
    else:
        return {}
    return {
        name: (value, f"{path}:{line}")
        for name, (value, line) in read_properties_file(path, origin).items()
    }


def resolve(flags: ConnectionFlags) -> Connection:
    """Merge defaults, file, environment and flags (module docstring: the order)."""
    environment = _environment()
    given = _config_file(flags, environment)
    for variable, value in sorted(environment.kafka_variables.items()):
        given[property_name(variable)] = (value, variable)
    properties = {name: value for name, (value, _) in given.items()}
    sources = {name: source for name, (_, source) in given.items()}
    from_properties = properties.pop("bootstrap.servers", None)
    candidates = (
        (flags.bootstrap_servers, "--bootstrap-servers"),
        (environment.bootstrap_servers, "KAIROS_BOOTSTRAP_SERVERS"),
        (from_properties, f"bootstrap.servers in {sources.pop('bootstrap.servers', '')}"),
        (DEFAULT_BOOTSTRAP, "the default; nothing set it"),
    )
    bootstrap, bootstrap_source = next((v, s) for v, s in candidates if v is not None)
    try:
        settings = KafkaSettings(
            bootstrap_servers=bootstrap,
            topic_prefix=_first(flags.topic_prefix, environment.topic_prefix, DEFAULT_TOPIC_PREFIX),
            schedules_partitions=_first(
                flags.schedules_partitions,
                environment.schedules_partitions,
                DEFAULT_SCHEDULES_PARTITIONS,
            ),
            properties=properties,
            signing_key=flags.signing_key or environment.signing_key,
        )
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            for error in invalid.errors(include_url=False)
        )
        raise KafkaSettingsError(f"bad Kafka settings: {problems}") from invalid
    timeout = _first(flags.timeout, environment.timeout, DEFAULT_TIMEOUT_S)
    return Connection(settings, bootstrap_source, float(timeout), sources)


_NAMED_PROPERTY = re.compile(r'configuration property:? "([^"]+)"')


def rejected_property(connection: Connection, message: str) -> str:
    """librdkafka's refusal of a property as one line naming it and where it was set."""
    clean = connection.without_secrets(message)
    named = _NAMED_PROPERTY.search(message)
    if named is None:
        return f"the Kafka client refused the settings: {clean}"
    name = named.group(1)
    return (
        f"Kafka property {name} (set in {connection.source_of(name)}) was refused: {clean}; "
        "see https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
    )


class _Silent:
    """A client log that drops everything: the property check's client never connects."""

    def log(self, level: int, message: str, *args: Any) -> None:
        del level, message, args


def check_properties(connection: Connection) -> None:
    """Build a client from the given properties alone (no bootstrap: nothing connects), so a
    name or a value librdkafka refuses is reported, with where it was set, before any work."""
    try:
        Producer({**connection.settings.properties, "logger": _Silent()})
    except KafkaException as error:
        raise KafkaSettingsError(rejected_property(connection, error.args[0].str())) from error


def probe(connection: Connection) -> None:
    """Ask the cluster for its metadata once, within the timeout: one line when nobody answers."""
    admin = AdminClient(connection.settings.consumer_config())
    try:
        admin.list_topics(timeout=connection.timeout_s)
    except KafkaException as error:
        raise KafkaSettingsError(
            f"no Kafka broker answered at {connection.settings.bootstrap_servers} "
            f"(from {connection.bootstrap_source}) within {connection.timeout_s:g}s: "
            f"{connection.without_secrets(error.args[0].str())}; set the address with "
            "--bootstrap-servers, KAIROS_BOOTSTRAP_SERVERS or bootstrap.servers in a "
            "--kafka-config file, or wait longer with --timeout"
        ) from error
