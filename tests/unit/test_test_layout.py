"""The suite collects as one run: `make test` runs every directory of tests/ in one pytest session.

pytest imports test modules by basename (rootdir-relative packages are not used here), so two
files with one name in different directories stop the whole run at collection, which running a
directory alone never shows.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        places[module.name].append(str(module.relative_to(TESTS)))
    shared = {name: paths for name, paths in places.items() if len(paths) > 1}
    assert not shared, f"rename one of each so the suite collects in one run: {shared}"
