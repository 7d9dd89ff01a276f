"""One set of job-parameter rules: what `kairos apply` refuses is what the executor dead-letters."""

from __future__ import annotations

from typing import Any

import pytest

from kairos.core.job_kinds import JobParamsError, ShellJob, job_params, job_problems
from kairos.core.schedule import JobSpec, parse_schedule

pytestmark = pytest.mark.unit


def problems_of(job: dict[str, Any]) -> list[str]:
    schedule = parse_schedule({"id": "billing.nightly", "cron": "0 2 * * *", "job": job})
    return [str(problem) for problem in job_problems(schedule, index=4)]


@pytest.mark.parametrize(
    "job, expected",
    [
        (
            {"kind": "shell"},
            "field 'job.command': is required for a shell job; add command: 'echo hi'",
        ),
        (
            {"kind": "http"},
            "field 'job.url': is required for a http job; add url: "
            "'https://billing.internal/settle'",
        ),
        (
            {"kind": "http", "url": "billing.internal/settle"},
            "field 'job.url': must start with http:// or https:// (got 'billing.internal/settle')",
        ),
        ({"kind": "kafka", "topic": "t"}, "field 'job.payload': is required for a kafka job"),
        ({"kind": "python"}, "field 'job.handler': is required for a python job"),
        (
            {"kind": "shell", "command": "echo", "env": {"RETRIES": 3}},
            "field 'job.env.RETRIES': Input should be a valid string (got 3)",
        ),
        (
            {"kind": "shell", "command": ""},
            "field 'job.command': must not be empty; for example command: 'echo hi'",
        ),
        (
            {"kind": "shell", "comand": "echo hi"},
            "field 'job.comand': is not a parameter of a shell job; its parameters are: "
            "command, env, secrets; did you mean 'command'?",
        ),
        (
            {"kind": "shel", "command": "echo hi"},
            "field 'job.kind': unknown kind 'shel'; executors run http, kafka, noop, python, "
            'shell (a team\'s own code runs as {"kind": "python", "handler": …}); '
            "did you mean 'shell'?",
        ),
    ],
)
def test_each_problem_names_the_schedule_the_field_and_the_fix(
    job: dict[str, Any], expected: str
) -> None:
    found = problems_of(job)
    assert any(
        problem.startswith("schedule 'billing.nightly' (schedules[4]): ") and expected in problem
        for problem in found
    ), found


def test_a_job_that_fits_its_kind_has_no_problem() -> None:
    assert problems_of({"kind": "shell", "command": "echo hi", "env": {"A": "1"}}) == []
    assert problems_of({"kind": "noop"}) == []
    assert problems_of({"kind": "http", "url": "https://x.internal/", "body": {"a": 1}}) == []


def test_every_problem_of_a_job_is_listed() -> None:
    assert len(problems_of({"kind": "http", "method": "POST", "verb": "GET"})) == 2


def test_the_executor_reads_the_same_rules_with_the_same_words() -> None:
    with pytest.raises(JobParamsError) as refused:
        job_params(JobSpec.model_validate({"kind": "shell", "comand": "echo hi"}))
    assert str(refused.value) == (
        "job kind 'shell': command: is required for a shell job; add command: 'echo hi'; "
        "comand: is not a parameter of a shell job; its parameters are: command, env, secrets; "
        "did you mean 'command'?"
    )
    for problem in problems_of({"kind": "shell", "comand": "echo hi"}):
        assert problem.split("field 'job.", 1)[1].replace("': ", ": ", 1) in str(refused.value)
    assert job_params(JobSpec.model_validate({"kind": "shell", "command": "x"})) == ShellJob(
        command="x"
    )
