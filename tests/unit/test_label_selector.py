"""Label selectors read as kubectl reads them (cli/label_selector.py)."""

from __future__ import annotations

import pytest

from kairos.cli.label_selector import LabelSelectorError, parse_selector

BILLING = {"team": "billing", "tier": "batch"}
OPS = {"team": "ops"}


@pytest.mark.parametrize(
    ("selector", "billing", "ops"),
    [
        ("team=billing", True, False),
        ("team==billing", True, False),
        ("team!=billing", False, True),
        ("tier!=batch", False, True),  # absent counts as different
        ("tier", True, False),
        ("!tier", False, True),
        ("team, tier", True, False),  # spaces around requirements are allowed
        ("team=billing,tier!=batch", False, False),
        ("team!=", True, True),  # an empty value: the label is absent or non-empty
    ],
)
def test_requirements_all_hold(selector: str, billing: bool, ops: bool) -> None:
    parsed = parse_selector(selector)
    assert (parsed.matches(BILLING), parsed.matches(OPS)) == (billing, ops)


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("", "empty requirement"),
        ("team=billing,", "empty requirement"),
        ("team notin (a,b)", "set-based requirements"),
        ("team=a=b", "invalid value 'a=b'"),
        ("!", "no valid label key"),
        ("te am", "no valid label key"),
    ],
)
def test_bad_selectors_say_what_is_wrong(selector: str, says: str) -> None:
    with pytest.raises(LabelSelectorError, match=says):
        parse_selector(selector)
