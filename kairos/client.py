"""The producer SDK in one import: `from kairos.client import SchedulesClient, Schedule, ...`.

    settings = KafkaSettings(bootstrap_servers="broker:9092")
    with SchedulesClient(settings, changed_by="billing") as client:
        client.upsert(Schedule(id="settlement-report", cron="0 2 * * *", timezone="Europe/Paris"))

See docs/producers.md.
"""

from kairos.core.schedule import Schedule, SchedulesInvalidError, ScheduleValidationError
from kairos.streams.schedule_publisher import (
    PublishError,
    ScheduleChange,
    ScheduleNotFoundError,
    SchedulesClient,
)
from kairos.streams.schedule_reader import ScheduleReadError, StoredSchedule
from kairos.streams.settings import KafkaSettings

__all__ = [
    "KafkaSettings",
    "PublishError",
    "Schedule",
    "ScheduleChange",
    "ScheduleNotFoundError",
    "ScheduleReadError",
    "ScheduleValidationError",
    "SchedulesClient",
    "SchedulesInvalidError",
    "StoredSchedule",
]
