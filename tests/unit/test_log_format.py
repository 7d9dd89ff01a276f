"""`kairos --log-format json`: one JSON object a line, a run's fields as fields."""

from __future__ import annotations

import json
import logging

from kairos.cli.log_format import JsonLogFormatter
from kairos.services.log_fields import run_fields


def test_a_json_log_line_carries_the_runs_fields() -> None:
    record = logging.LogRecord("kairos.x", logging.INFO, "f.py", 1, "run=%s done", ("r1",), None)
    for name, value in run_fields("r1", "payments.x", "payments", 3).items():
        setattr(record, name, value)
    line = json.loads(JsonLogFormatter().format(record))
    assert line["message"] == "run=r1 done" and line["level"] == "INFO"
    assert (line["run_id"], line["schedule_id"], line["owner"], line["partition"]) == (
        "r1", "payments.x", "payments", 3,
    )  # fmt: skip
