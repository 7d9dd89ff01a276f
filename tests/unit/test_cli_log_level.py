"""`--log-level` of `kairos ticker` and `kairos executor`: a bad level is a usage error.

Found by `python -m bench.fuzz`: `--log-level LOUD` reached `logging.setLevel`, whose ValueError
ended the command with a traceback before any other check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.cli.options import checked_log_level

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("service", ["ticker", "executor"])
@pytest.mark.parametrize("level", ["LOUD", "", "50"])
def test_a_badchecked_log_level_is_refused_in_one_message_exit_2(
    tmp_path: Path, service: str, level: str
) -> None:
    result = CliRunner().invoke(
        app,
        # A closed port: had the level passed, the service would have started, not exited.
        [
            "--bootstrap-servers",
            "127.0.0.1:1",
            service,
            "--instance",
            "fuzz",
            "--state-dir",
            str(tmp_path),
            "--log-level",
            level,
        ],
        env={"KAIROS_LOG_LEVEL": None},
    )
    assert result.exit_code == 2
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "is not a log level; use one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in " ".join(
        result.output.replace("│", " ").split()
    )


def test_a_level_in_any_case_is_accepted_and_normalised() -> None:
    assert checked_log_level(" debug ") == "DEBUG"
