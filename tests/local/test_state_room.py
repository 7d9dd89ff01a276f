"""A ticker takes no partitions while its state directory's file system lacks room, says so
once a minute (not once a check), and says when the room is back."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from kairos.services.ticker.state_room import StateRoom

pytestmark = pytest.mark.local


def test_a_full_state_directory_keeps_the_ticker_out_and_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_dir = tmp_path / "state"
    free = shutil.disk_usage(tmp_path).free
    room = StateRoom(state_dir, "t1", room_bytes=free + 2**40)
    with caplog.at_level(logging.WARNING, logger="kairos.services.ticker.state_room"):
        assert not room.enough()
        assert not room.enough()
        reports = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(reports) == 1, reports
        assert str(state_dir) in reports[0] and "taking no partitions" in reports[0]
        room.room_bytes = 0
        assert room.enough()
    assert "has room again" in caplog.records[-1].getMessage()
