"""`kairos apply` that could not compare exits 2, with or without `--dry-run`: never 1, which
`--dry-run` gives for drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app

pytestmark = pytest.mark.unit

VALID = "schedules:\n  - id: hourly\n    cron: '0 * * * *'\n"


def apply_to_a_closed_port(tmp_path: Path, *args: str) -> Result:
    path = tmp_path / "s.yaml"
    path.write_text(VALID, encoding="utf-8")
    # Nothing listens on port 1: the schedules topic cannot be read.
    connection = ["--bootstrap-servers", "127.0.0.1:1", "--timeout", "1"]
    return CliRunner().invoke(app, [*connection, "apply", "-f", str(path), *args])


def test_an_unreachable_broker_is_exit_2_with_dry_run_and_without(tmp_path: Path) -> None:
    dry = apply_to_a_closed_port(tmp_path, "--dry-run")
    assert dry.exit_code == 2, dry.output
    assert "no Kafka broker answered at 127.0.0.1:1" in dry.stderr
    real = apply_to_a_closed_port(tmp_path)
    assert real.exit_code == 2, real.output


def test_no_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["apply", "--dry-run"])
    assert result.exit_code == 2
    assert "-f" in result.stderr
