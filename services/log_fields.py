"""The fields a log line about one run carries (`kairos --log-format json` writes them as JSON
fields; the text form shows them in the message)."""

from __future__ import annotations


def run_fields(
    run_id: str, schedule_id: str, owner: str | None = None, partition: int | None = None
) -> dict[str, object]:
    """`extra=` for a log call about one run."""
    return {"run_id": run_id, "schedule_id": schedule_id, "owner": owner, "partition": partition}
