"""Label selectors as kubectl reads them: `-l team=billing,tier!=batch,critical,!legacy`.

Equality-based only: `key=value` and `key==value` (the label is there with that value),
`key!=value` (the label is absent or has another value), `key` (the label is there), `!key`
(it is not). Every requirement must hold. Set-based requirements (`key in (a,b)`) are refused
with a clear error rather than read as something else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kairos.core.errors import KairosError

Operator = Literal["=", "!=", "exists", "absent"]

# Kubernetes' label key (optional DNS prefix, then a name) and value characters, loosely: enough
# to catch a typo such as a space or a stray operator, without refusing a label Kairos accepts.
_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?$")
_KEY_RULE = "letters, digits, '.', '_', '-', '/', starting and ending with a letter or digit"
_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
_VALUE_RULE = "letters, digits, '.', '_', '-'; one operator per requirement"
_SET_BASED = re.compile(r"\s(in|notin)\s*\(", re.IGNORECASE)
EXAMPLE = "-l team=billing,tier!=batch,critical,!legacy"


class LabelSelectorError(KairosError):
    """A selector that cannot be read; the message names the part and the fix."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    value: str | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "absent":
            return self.key not in labels
        if self.operator == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


def parse_selector(text: str) -> LabelSelector:
    """The selector `text` spells; `LabelSelectorError` saying which part is wrong, and why."""
    if _SET_BASED.search(f" {text}"):
        raise LabelSelectorError(
            f"label selector {text!r}: set-based requirements (in, notin) are not supported; "
            f"use equality ones, e.g. {EXAMPLE}"
        )
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise LabelSelectorError(
            f"label selector {text!r} has an empty requirement; separate requirements with "
            f"single commas, e.g. {EXAMPLE}"
        )
    return LabelSelector(tuple(_requirement(part, text) for part in parts))


def _requirement(part: str, text: str) -> Requirement:
    if part.startswith("!"):
        return Requirement(_key(part[1:].strip(), part, text), "absent")
    spellings: tuple[tuple[str, Operator], ...] = (("!=", "!="), ("==", "="), ("=", "="))
    for spelling, operator in spellings:
        if spelling in part:
            key, _, value = part.partition(spelling)
            return Requirement(
                _key(key.strip(), part, text), operator, _value(value.strip(), part, text)
            )
    return Requirement(_key(part, part, text), "exists")


def _key(key: str, part: str, text: str) -> str:
    return _spelt(_KEY, key, part, text, f"has no valid label key ({_KEY_RULE})")


def _value(value: str, part: str, text: str) -> str:
    return _spelt(_VALUE, value, part, text, f"has an invalid value {value!r} ({_VALUE_RULE})")


def _spelt(spelling: re.Pattern[str], word: str, part: str, text: str, problem: str) -> str:
    """`word`, when `spelling` matches it; else the error naming the selector, the `part` of it
    that holds the word, and the `problem`."""
    if not spelling.match(word):
        raise LabelSelectorError(f"label selector {text!r}: {part!r} {problem}, e.g. {EXAMPLE}")
    return word
