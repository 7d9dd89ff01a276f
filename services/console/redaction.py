"""What of a definition only its owning team sees: the values a job is given at run time.

A job's environment, headers, body, payload and handler arguments are where teams put tokens
(docs/executors.md recommends secret references instead: `secrets`, `secret_headers`, which
name a secret and are shown as they are). Everyone but the owning team's users sees each such
value replaced, in pages, change diffs and the API; a value a change rotated is marked changed,
so the history still says that something moved, not what.
"""

from __future__ import annotations

from typing import Any

from kairos.services.console.identity import Identity

REDACTED = "<redacted>"
CHANGED = "<redacted: changed>"
_KEYED = ("env", "headers")
"""Fields whose keys are shown and values hidden."""
_WHOLE = ("body", "payload", "args")
"""Fields hidden whole: their shape may hold the secret."""
_ABSENT = object()


def sees_secrets(identity: Identity | None, owner: str | None) -> bool:
    return identity is not None and owner is not None and owner in identity.teams


def redacted(definition: dict[str, Any], before: dict[str, Any] | None = None) -> dict[str, Any]:
    """`definition` with its job's secret values replaced; a value that differs from the one in
    `before` (the previous version) is marked changed."""
    job = definition.get("job")
    if not isinstance(job, dict):
        return definition
    old_job = (before or {}).get("job")
    old: dict[str, Any] = old_job if isinstance(old_job, dict) else {}
    compared = before is not None
    hidden = dict(job)
    for name in _KEYED:
        values = job.get(name)
        if isinstance(values, dict):
            was = old.get(name)
            was = was if isinstance(was, dict) else {}
            hidden[name] = {
                key: _mark(value, was.get(key, _ABSENT) if compared else value)
                for key, value in values.items()
            }
    for name in _WHOLE:
        if name in job:
            hidden[name] = _mark(job[name], old.get(name, _ABSENT) if compared else job[name])
    return {**definition, "job": hidden}


def _mark(value: Any, previous: Any) -> str:
    return REDACTED if value == previous else CHANGED
