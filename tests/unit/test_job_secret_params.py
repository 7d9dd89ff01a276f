"""Secrets are named in a job, never inlined: the names' rules, checked before publishing."""

from __future__ import annotations

from typing import Any

import pytest

from kairos.core.job_kinds import HttpJob, JobParamsError, ShellJob, job_params
from kairos.core.schedule import JobSpec

pytestmark = pytest.mark.unit


def problem_of(kind: str, params: dict[str, Any]) -> str:
    with pytest.raises(JobParamsError) as refused:
        job_params(JobSpec.model_validate({"kind": kind, **params}))
    return refused.value.problem


def test_a_shell_job_names_its_secrets_by_variable() -> None:
    spec = {"kind": "shell", "command": "deploy", "secrets": {"API_TOKEN": "api.token"}}
    job = job_params(JobSpec.model_validate(spec))
    assert isinstance(job, ShellJob)
    assert job.secrets == {"API_TOKEN": "api.token"}


def test_an_http_job_names_its_secret_headers() -> None:
    spec = {"kind": "http", "url": "https://x.internal", "secret_headers": {"Authorization": "b"}}
    job = job_params(JobSpec.model_validate(spec))
    assert isinstance(job, HttpJob)
    assert job.secret_headers == {"Authorization": "b"}


@pytest.mark.parametrize("name", ["../payments/token", "payments/token", "..", ".hidden", ""])
def test_a_secret_name_that_is_not_a_plain_file_name_is_refused(name: str) -> None:
    problem = problem_of("shell", {"command": "x", "secrets": {"TOKEN": name}})
    assert problem == (
        "secrets.TOKEN: is not a secret name: use letters, digits, '_', '.' and '-', not "
        f"starting with '.' (a file of your team's secrets directory, no '/') (got {name!r})"
    )


def test_a_secret_variable_must_be_an_environment_variable_name() -> None:
    assert problem_of("shell", {"command": "x", "secrets": {"1TOKEN": "token"}}) == (
        "secrets.1TOKEN: is not an environment variable name: use letters, digits and '_', "
        "not starting with a digit (got '1TOKEN')"
    )


def test_a_variable_set_by_env_and_by_secrets_is_refused() -> None:
    params = {"command": "x", "env": {"TOKEN": "plain"}, "secrets": {"TOKEN": "token"}}
    assert problem_of("shell", params) == (
        "secrets: TOKEN set by both env and secrets; keep each in one of them"
    )


def test_a_secret_header_must_be_a_header_name() -> None:
    params = {"url": "https://x.internal", "secret_headers": {"Bad Header": "token"}}
    assert problem_of("http", params) == (
        "secret_headers.Bad Header: is not an HTTP header name: use letters, digits and "
        "!#$%&'*+.^_`|~- (got 'Bad Header')"
    )


def test_a_header_in_headers_and_secret_headers_is_refused_whatever_its_case() -> None:
    params = {
        "url": "https://x.internal",
        "headers": {"authorization": "plain"},
        "secret_headers": {"Authorization": "token"},
    }
    assert problem_of("http", params) == (
        "secret_headers: authorization set by both headers and secret_headers; "
        "keep each in one of them"
    )
