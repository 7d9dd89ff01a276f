"""`kairos ticker`: run one ticker process until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from kairos.cli.options import (
    LogLevelOption,
    fail,
    invalid_settings,
    service_arguments,
    service_kafka_settings,
)
from kairos.cli.settings_options import with_settings
from kairos.core.errors import KairosError
from kairos.services.stopping import stop_on_signals
from kairos.services.ticker.service import Ticker
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import KafkaSettings


@with_settings(TickerSettings)
def ticker(context: typer.Context, log_level: LogLevelOption = "INFO", **settings: Any) -> None:
    """Own schedules partitions and fire their due occurrences in fenced transactions."""
    logging.getLogger().setLevel(log_level.upper())
    try:
        service = Ticker(service_kafka_settings(context), TickerSettings(**settings))
    except ValidationError as invalid:
        raise invalid_settings(invalid) from invalid
    except (ValueError, KairosError) as error:
        raise fail(str(error)) from error
    stop = stop_on_signals(logging.getLogger(__name__), "stopping after the open transaction")
    try:
        service.run(stop)
    except KairosError as error:
        raise fail(str(error)) from error


def ticker_arguments(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    *,
    session_timeout_ms: int | None = None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    log_level: str | None = None,
    group_id: str | None = None,
    ownership: Ownership | None = None,
    signature_max_age_s: float | None = None,
) -> list[str]:
    """The `kairos` arguments of a ticker of this deployment (`None`: the flag's default).

    How `kairos dev up`, the tests and the benchmarks start one, so they cannot drift apart.
    """
    return service_arguments(
        "ticker",
        settings,
        instance,
        state_dir,
        (
            ("--group-id", group_id),
            ("--session-timeout-ms", session_timeout_ms),
            ("--metrics-port", metrics_port),
            ("--metrics-host", metrics_host),
            ("--log-level", log_level),
            ("--ownership", None if ownership is None else ownership.value),
            ("--signature-max-age-s", signature_max_age_s),
        ),
    )
