"""How the services' logs are written: text for a terminal, or one JSON object a line for a log
pipeline (`--log-format json`), with a run's id, schedule, owner and partition as fields where
the line is about one."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import typer

RUN_FIELDS = ("run_id", "schedule_id", "owner", "partition")
"""Attributes a log call passes in `extra=` (`kairos.services.log_fields.run_fields`)."""


class JsonLogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in RUN_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


LOG_FORMATS = ("text", "json")


def checked_log_format(value: str) -> str:
    if value not in LOG_FORMATS:
        raise typer.BadParameter(f"{value!r} is not a log format; use text or json")
    return value


def use_log_format(chosen: str) -> None:
    """Write every log line of this process in `chosen` form (`text` or `json`)."""
    if chosen == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLogFormatter())
