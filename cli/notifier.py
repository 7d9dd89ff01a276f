"""`kairos notifier`: tells each team, on its routes, what went wrong with its runs and changes."""

from __future__ import annotations

import logging
from typing import Any

import typer
from pydantic import ValidationError

from kairos.cli.options import LogLevelOption, fail, invalid_settings, service_kafka_settings
from kairos.cli.settings_options import with_settings
from kairos.core.errors import KairosError
from kairos.services.notifier.service import Notifier
from kairos.services.notifier.settings import NotifierSettings
from kairos.services.stopping import stop_on_signals


@with_settings(NotifierSettings)
def notifier(context: typer.Context, log_level: LogLevelOption = "INFO", **settings: Any) -> None:
    """Deliver each failed run, missed deadline, late start and refused change to its team's
    routes (webhook, Slack, email), at least once; see docs/notifications.md."""
    logging.getLogger().setLevel(log_level.upper())
    try:
        service = Notifier(service_kafka_settings(context), NotifierSettings(**settings))
    except ValidationError as invalid:
        raise invalid_settings(invalid) from invalid
    except KairosError as error:
        raise fail(str(error)) from error
    stop = stop_on_signals(logging.getLogger(__name__), "stopping")
    service.run(stop)
