"""The producer SDK in one import: `from kairos.client import SchedulesClient, Schedule, ...`.

    settings = KafkaSettings(bootstrap_servers="broker:9092")
    with SchedulesClient(settings, changed_by="billing") as client:
        client.upsert(Schedule(id="settlement-report", cron="0 2 * * *", timezone="Europe/Paris"))

See docs/producers.md; shared business calendars (`CalendarsClient`, `read_calendars`):
docs/calendars.md.
"""

from kairos.core.business_calendar import BusinessCalendar, CalendarsInvalidError, load_calendars
from kairos.core.schedule import Schedule, SchedulesInvalidError, ScheduleValidationError
from kairos.streams.client.calendar_publisher import CalendarPublishError, CalendarsClient
from kairos.streams.readers.calendar_reader import CalendarReadError, read_calendars
from kairos.streams.client.schedule_publisher import (
    PublishError,
    ScheduleChange,
    ScheduleNotFoundError,
    SchedulesClient,
)
from kairos.streams.readers.held_schedules import StoredSchedule
from kairos.streams.readers.schedule_reader import ScheduleReadError
from kairos.streams.kafka.settings import KafkaSettings

__all__ = [
    "BusinessCalendar",
    "CalendarPublishError",
    "CalendarReadError",
    "CalendarsClient",
    "CalendarsInvalidError",
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
    "load_calendars",
    "read_calendars",
]
