"""What `kairos apply` prints: the plan as a diff (`-o table`) or as one JSON or YAML document.

The table lists each schedule apply creates, updates (each changed field, old → new) or deletes
by `--prune`, then one summary line with the unchanged count: a CI log of a thousand-schedule
repository shows what moves, not what stays. The document has every change in full, the
unchanged ids too, for scripts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import yaml

OutputFormat = Literal["table", "json", "yaml"]
Action = Literal["create", "update", "delete", "unchanged"]
ACTIONS: tuple[Action, ...] = ("create", "update", "delete", "unchanged")

_SHOWN_VALUE_LIMIT = 60


@dataclass(frozen=True)
class FieldChange:
    """One field an update changes, as JSON values."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class PlanLine:
    """One schedule's part of the plan, as the report shows it."""

    action: Action
    schedule_id: str
    revision: int
    changes: tuple[FieldChange, ...] = ()
    definition: dict[str, Any] | None = None
    """The definition a create publishes, as JSON values."""


def summary(lines: list[PlanLine]) -> str:
    counts = _counts(lines)
    return ", ".join(f"{counts[action]} {action}" for action in ACTIONS)


def table_lines(lines: list[PlanLine]) -> list[str]:
    """The diff: creates, updates with their fields, deletes; unchanged ones are counted only."""
    shown: list[str] = []
    for line in lines:
        if line.action == "unchanged":
            continue
        suffix = "  (--prune: not in the files)" if line.action == "delete" else ""
        shown.append(f"{line.action:<10} {line.schedule_id}{suffix}")
        shown.extend(
            f"             {change.field}: {_shown(change.old)} → {_shown(change.new)}"
            for change in line.changes
        )
    return shown


def document(lines: list[PlanLine], dry_run: bool, fmt: OutputFormat) -> str:
    """The plan as JSON or YAML: `{dry_run, changed, summary, changes: [...], unchanged: [...]}`."""
    body = {
        "dry_run": dry_run,
        "changed": any(line.action != "unchanged" for line in lines),
        "summary": _counts(lines),
        "changes": [_change_json(line) for line in lines if line.action != "unchanged"],
        "unchanged": [line.schedule_id for line in lines if line.action == "unchanged"],
    }
    if fmt == "json":
        return json.dumps(body, indent=2, sort_keys=False)
    return yaml.safe_dump(body, sort_keys=False, allow_unicode=True).rstrip("\n")


def _change_json(line: PlanLine) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "action": line.action,
        "id": line.schedule_id,
        "revision": line.revision,
    }
    if line.action == "update":
        entry["fields"] = {c.field: {"old": c.old, "new": c.new} for c in line.changes}
    if line.definition is not None:
        entry["definition"] = line.definition
    return entry


def _counts(lines: list[PlanLine]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(ACTIONS, 0)
    for line in lines:
        counts[line.action] += 1
    return counts


def _shown(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    if len(text) <= _SHOWN_VALUE_LIMIT:
        return text
    return text[: _SHOWN_VALUE_LIMIT - 3] + "..."
