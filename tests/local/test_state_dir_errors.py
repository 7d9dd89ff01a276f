"""A state directory that cannot be created is one clear error at start, never a traceback.

Found by `python -m bench.fuzz` (`--state-dir /dev/null/state`): the executor ended in a
`NotADirectoryError` traceback from its SQLite store, and the ticker logged one on every
partition assignment, retrying forever.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kairos.services.ticker.settings import StateDirError, ensure_state_dir
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.dedupe.base import DedupeStoreError

pytestmark = pytest.mark.local


@pytest.fixture
def under_a_file(tmp_path: Path) -> Path:
    """A path whose parent is a regular file: no directory can be made there."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    return blocker / "state"


def test_the_sqlite_store_names_the_directory_it_cannot_create(under_a_file: Path) -> None:
    with pytest.raises(DedupeStoreError, match="cannot create its directory"):
        open_dedupe_store(sqlite_url(under_a_file / "dedupe.sqlite3"))


def test_the_ticker_refuses_a_state_dir_it_cannot_create(under_a_file: Path) -> None:
    with pytest.raises(StateDirError, match=f"--state-dir {under_a_file}: cannot create it"):
        ensure_state_dir(under_a_file)


@pytest.mark.parametrize("service", ["ticker", "executor"])
def test_the_service_exits_2_with_one_error_line(under_a_file: Path, service: str) -> None:
    # A closed port: the state directory is checked before any broker is needed.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kairos.cli",
            "--bootstrap-servers",
            "127.0.0.1:1",
            service,
            "--instance",
            "fuzz",
            "--state-dir",
            str(under_a_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot create" in errors[0] and str(under_a_file) in errors[0]
