"""`kairos concurrency set|list|remove` against an executor's SQLite dedupe store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.services.executor.settings import dedupe_store_url
from kairos.streams.dedupe import open_dedupe_store

pytestmark = pytest.mark.local


def concurrency(state_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["concurrency", *args, "--state-dir", str(state_dir)])


def test_limits_are_set_listed_and_removed_in_the_executors_store(tmp_path: Path) -> None:
    open_dedupe_store(dedupe_store_url(tmp_path, None)).close()  # as an executor's first start
    assert concurrency(tmp_path, "set", "owner:payments", "3").exit_code == 0
    assert concurrency(tmp_path, "set", "label:payments/warehouse=eu", "1").exit_code == 0
    assert concurrency(tmp_path, "set", "shared:warehouse=eu", "4").exit_code == 0
    table = concurrency(tmp_path, "list")
    assert table.stdout.splitlines() == [
        "GROUP                        LIMIT  RUNNING  WAITING",
        "label:payments/warehouse=eu  1      0        0",
        "owner:payments               3      0        0",
        "shared:warehouse=eu          4      0        0",
    ]
    assert concurrency(tmp_path, "set", "owner:payments", "5").exit_code == 0
    listed = json.loads(concurrency(tmp_path, "list", "--json").stdout)["groups"]
    assert [(g["group"], g["max_running"]) for g in listed] == [
        ("label:payments/warehouse=eu", 1),
        ("owner:payments", 5),
        ("shared:warehouse=eu", 4),
    ]
    assert concurrency(tmp_path, "remove", "shared:warehouse=eu").exit_code == 0
    again = concurrency(tmp_path, "remove", "shared:warehouse=eu")
    assert again.exit_code == 2 and "has no limit" in again.output


def test_bad_input_is_refused_with_what_to_do(tmp_path: Path) -> None:
    missing = concurrency(tmp_path / "typo", "set", "owner:payments", "3")
    assert missing.exit_code == 2
    assert "no dedupe store at" in missing.output and "--state-dir" in missing.output
    assert not (tmp_path / "typo").exists()
    open_dedupe_store(dedupe_store_url(tmp_path, None)).close()
    bad = concurrency(tmp_path, "set", "payments", "3")
    assert bad.exit_code == 2 and "write owner:OWNER, label:OWNER/KEY=VALUE" in bad.output
    whose = concurrency(tmp_path, "set", "label:warehouse=eu", "3")
    assert whose.exit_code == 2 and "a label group is one team's: name the owner" in whose.output
    assert "shared:KEY=VALUE" in whose.output
    zero = concurrency(tmp_path, "set", "owner:payments", "0")
    assert zero.exit_code == 2 and "give at least 1" in zero.output
    assert "no group is limited" in concurrency(tmp_path, "list").stdout
