"""Every job kind a schedule may name has a runner, and no runner serves a kind that is not one.

A kind added to `kairos.core.job_kinds` without a runner would be accepted at apply and fail at
every attempt; a runner left behind by a removed kind would be dead code.
"""

from __future__ import annotations

from kairos.core.job_kinds import JOB_KINDS
from kairos.services.executor.runners import JOB_RUNNERS


def test_the_runner_table_and_the_job_kinds_name_the_same_kinds() -> None:
    assert set(JOB_RUNNERS) == set(JOB_KINDS)
