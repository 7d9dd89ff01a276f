"""The built-in job kinds and the parameters each needs: one set of rules for every reader.

`kairos apply` and `kairos preview` check a schedule's job with `job_problems` before anything
is published; the executor checks each run's job with `job_params` when it admits the run, and
dead-letters it with the same words when it does not fit. The ticker does not check jobs: the
job is opaque to the calendar, and an executor newer than the ticker may run a kind this code
does not know (docs/executors.md, "Job kinds").
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

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


SECRET_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
"""A secret is the file `<secrets root>/<team>/<name>`: a plain file name, so no `/` and no
leading dot (which excludes `.` and `..`), and the executor still checks where it resolves."""
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""An HTTP header name: RFC 9110's token."""

SecretName = Annotated[str, Field(pattern=SECRET_NAME_PATTERN)]
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN)]
HeaderName = Annotated[str, Field(pattern=HEADER_NAME_PATTERN)]


class ShellJob(_Params):
    command: str = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[EnvName, SecretName] = Field(default_factory=dict)
    """Environment variable → the name of one of the owner's secrets, read when the job runs."""

    @field_validator("secrets")
    @classmethod
    def _not_also_in_env(cls, secrets: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        _refuse_twice_set(set(secrets), set(info.data.get("env", {})), "env and secrets")
        return secrets


class HttpJob(_Params):
    url: str = Field(pattern=r"^https?://")
    method: str = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | dict[str, Any] | list[Any] | None = None
    secret_headers: dict[HeaderName, SecretName] = Field(default_factory=dict)
    """Header → the name of one of the owner's secrets, read when the request is sent."""

    @field_validator("secret_headers")
    @classmethod
    def _not_also_in_headers(cls, secret: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        # Header names are case-insensitive: `authorization` in one map shadows the other's.
        plain = {name.lower() for name in info.data.get("headers", {})}
        _refuse_twice_set({n.lower() for n in secret}, plain, "headers and secret_headers")
        return secret


def _refuse_twice_set(names: set[str], others: set[str], where: str) -> None:
    both = sorted(names & others)
    if both:
        raise PydanticCustomError(
            "set_twice",
            "{names} set by both {where}; keep each in one of them",
            {"names": ", ".join(both), "where": where},
        )


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

_SECRET_NAME_RULE = (
    "is not a secret name: use letters, digits, '_', '.' and '-', not starting with '.' "
    "(a file of your team's secrets directory, no '/')"
)
_NAME_RULES = {
    # (what a value of the map breaks, what a key breaks)
    "secrets": (
        _SECRET_NAME_RULE,
        "is not an environment variable name: use letters, digits and '_', not starting with "
        "a digit",
    ),
    "secret_headers": (
        _SECRET_NAME_RULE,
        "is not an HTTP header name: use letters, digits and !#$%&'*+.^_`|~-",
    ),
}


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
    # Pydantic places a map key's error at `<field>.<key>.[key]`; `<field>.<key>` says it.
    is_key = detail["loc"][-1:] == ("[key]",)
    place = detail["loc"][:-1] if is_key else detail["loc"]
    field = ".".join(str(part) for part in place) or "job"
    name = str(place[0]) if place else ""
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
    if error == "string_pattern_mismatch" and name in _NAME_RULES:
        return field, _NAME_RULES[name][is_key] + got
    if error == "string_too_short":
        example = _EXAMPLES.get(name)
        return field, "must not be empty" + (f"; for example {example}" if example else "")
    return field, f"{detail['msg']}{got}"
