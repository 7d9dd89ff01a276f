"""What a shared executor lets each team's jobs be and reach: the runtime policy file.

    teams:
      payments:
        user: "2001:2001"                 # uid:gid the team's shell jobs run as
        http_allow: [10.20.0.0/16]        # private networks its http jobs may reach
        kafka_topics: [payments.*]        # topics its kafka jobs may write (`*` ends a prefix)
    default:                              # every team not listed, and runs without an owner
      kafka_topics: []

`kairos executor --runtime-policy FILE` reads it (YAML or JSON) at start; this module owns the
format. What each field does is enforced where the job runs: `user` by `shell_job`,
`http_allow` by `http_job`, `kafka_topics` by `kafka_job` (docs/executors.md, "Security model").
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kairos.core.errors import KairosError


class RuntimePolicyError(KairosError):
    """The runtime policy file cannot be read or does not fit its format."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"runtime policy {path}: {problem}")


class TeamRuntime(BaseModel):
    """What one team's jobs run as and may reach on this executor."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str | None = Field(default=None, pattern=r"^[0-9]+:[0-9]+$")
    """`uid:gid` the team's shell jobs run as; `None`: the team has no uid of its own here."""
    http_allow: tuple[str, ...] = ()
    """Networks (CIDR) or host names beyond the public internet the team's http jobs reach."""
    kafka_topics: tuple[str, ...] = ()
    """Topics the team's kafka jobs may write: a name, or a prefix ending in `*`."""


class RuntimePolicy(BaseModel):
    """Every team's runtime on this executor; a team not listed gets `default`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    teams: dict[str, TeamRuntime] = Field(default_factory=dict)
    default: TeamRuntime = TeamRuntime()

    def of(self, owner: str | None) -> TeamRuntime:
        """The runtime of `owner`'s jobs (`None`: a run without an owner)."""
        if owner is None:
            return self.default
        return self.teams.get(owner, self.default)


def load_runtime_policy(path: Path) -> RuntimePolicy:
    """The policy in `path`, or `RuntimePolicyError` saying what is wrong and where."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise RuntimePolicyError(path, f"cannot be read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise RuntimePolicyError(path, f"is not YAML or JSON: {error}") from None
    try:
        return RuntimePolicy.model_validate(document or {})
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or 'document'}: {detail['msg']}"
            for detail in invalid.errors(include_url=False)
        )
        raise RuntimePolicyError(path, problems) from None
