"""The built-in job kinds and the parameters each needs: one set of rules for every reader.

`kairos apply` and `kairos preview` check a schedule's job with `job_problems` before anything
is published; the executor checks each run's job with `job_params` when it admits the run, and
dead-letters it with the same words when it does not fit. The ticker does not check jobs: the
job is opaque to the calendar, and an executor newer than the ticker may run a kind this code
does not know (docs/executors.md, "Job kinds").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from kairos.core.errors import KairosError
from kairos.core.schedule import JobSpec, Schedule, ScheduleValidationError
from kairos.core.suggestions import did_you_mean


class JobParamsError(KairosError):
    """A job's parameters do not fit its kind: the run is dead-lettered with `problem`."""

    def __init__(self, kind: str, problem: str) -> None:
        self.kind = kind
        self.problem = problem
        super().__init__(f"job kind {kind!r}: {problem}")


class _Params(BaseModel):
    # Unknown parameters are refused, not ignored: a job written for a newer executor must not
    # run with half its meaning.
    model_config = ConfigDict(frozen=True, extra="forbid")


class NoopJob(_Params):
    """Does nothing and succeeds: the default job of a schedule without one."""


class ShellJob(_Params):
    command: str = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)


class HttpJob(_Params):
    url: str = Field(pattern=r"^https?://")
    method: str = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | dict[str, Any] | list[Any] | None = None


class KafkaJob(_Params):
    topic: str = Field(min_length=1)
    payload: str | dict[str, Any] | list[Any]
    headers: dict[str, str] = Field(default_factory=dict)


class PythonJob(_Params):
    handler: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


JobParams = NoopJob | ShellJob | HttpJob | KafkaJob | PythonJob
JOB_KINDS: dict[str, type[JobParams]] = {
    "noop": NoopJob,
    "shell": ShellJob,
    "http": HttpJob,
    "kafka": KafkaJob,
    "python": PythonJob,
}

_EXAMPLES = {
    "command": "command: 'echo hi'",
    "url": "url: 'https://billing.internal/settle'",
    "topic": "topic: billing.requests",
    "payload": "payload: {day: today}",
    "handler": "handler: record-settlement (a handler your executor registers)",
}
"""How to write each required parameter, for the error that says it is missing."""


def job_params(job: JobSpec) -> JobParams:
    """The job's parameters, validated for its kind; raises `JobParamsError` naming each problem."""
    model = JOB_KINDS.get(job.kind)
    if model is None:
        raise JobParamsError(job.kind, _unknown_kind(job.kind))
    try:
        return model.model_validate(job.model_extra or {})
    except ValidationError as invalid:
        problems = "; ".join(
            f"{field}: {problem}" for field, problem in _described(job.kind, model, invalid)
        )
        raise JobParamsError(job.kind, problems) from None


def job_problems(schedule: Schedule, index: int | None = None) -> list[ScheduleValidationError]:
    """Every way the schedule's job does not fit its kind, each naming the `job.<field>`."""
    kind = schedule.job.kind
    model = JOB_KINDS.get(kind)
    if model is None:
        problems = [("kind", _unknown_kind(kind))]
    else:
        try:
            model.model_validate(schedule.job.model_extra or {})
            return []
        except ValidationError as invalid:
            problems = _described(kind, model, invalid)
    return [
        ScheduleValidationError(
            schedule_id=schedule.id, index=index, field=f"job.{field}", problem=problem
        )
        for field, problem in problems
    ]


def _unknown_kind(kind: str) -> str:
    return (
        f"unknown kind {kind!r}; executors run {', '.join(sorted(JOB_KINDS))} "
        '(a team\'s own code runs as {"kind": "python", "handler": …})'
        f"{did_you_mean(kind, JOB_KINDS)}"
    )


def _described(
    kind: str, model: type[JobParams], invalid: ValidationError
) -> list[tuple[str, str]]:
    return [_describe(kind, model, detail) for detail in invalid.errors(include_url=False)]


def _describe(kind: str, model: type[JobParams], detail: ErrorDetails) -> tuple[str, str]:
    field = ".".join(str(part) for part in detail["loc"]) or "job"
    name = str(detail["loc"][0]) if detail["loc"] else ""
    error = detail["type"]
    if error == "missing":
        example = _EXAMPLES.get(name)
        return field, f"is required for a {kind} job" + (f"; add {example}" if example else "")
    if error == "extra_forbidden":
        known = list(model.model_fields)
        listed = ", ".join(known) if known else "none"
        return field, (
            f"is not a parameter of a {kind} job; its parameters are: {listed}"
            f"{did_you_mean(name, known)}"
        )
    shown = detail.get("input")
    got = f" (got {shown!r})" if isinstance(shown, str | int | float | bool) else ""
    if error == "string_pattern_mismatch" and name == "url":
        return field, f"must start with http:// or https://{got}"
    if error == "string_too_short":
        example = _EXAMPLES.get(name)
        return field, "must not be empty" + (f"; for example {example}" if example else "")
    return field, f"{detail['msg']}{got}"
