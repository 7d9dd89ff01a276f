"""`kairos --version`: the version pip recorded for the distribution, not a copy in the code."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.services.build import DISTRIBUTION

pytestmark = pytest.mark.unit


def test_version_prints_the_installed_distributions_version_and_exits_0() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"kairos {version(DISTRIBUTION)}\n"


def test_version_needs_no_broker_and_wins_over_a_command() -> None:
    # Eager: printed before any command runs, so a closed port is never dialled.
    result = CliRunner().invoke(app, ["--bootstrap-servers", "127.0.0.1:1", "--version", "apply"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("kairos ")
