"""A service's command takes every field of its settings model, from an option or from its
environment variable, documented by the field's docstring (`kairos.cli.settings_options`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.cli.settings_options import with_settings
from kairos.core.durations import parse_duration
from kairos.services.console.settings import ConsoleSettings
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.settings_fields import ServiceSettings, Setting, setting_of
from kairos.services.ticker.settings import TickerSettings

pytestmark = pytest.mark.unit


class _Sample(ServiceSettings):
    name: Annotated[str, Setting(env="KAIROS_SAMPLE_NAME")]
    """Required, from its own variable."""
    count: int = Field(default=3, ge=1)
    """Derived flag and variable."""
    lease: Annotated[timedelta, Setting(parse=parse_duration)] = timedelta(seconds=30)
    """Read as a duration."""
    home: Path | None = None
    """Optional."""


def _sample_app() -> typer.Typer:
    sample = typer.Typer()

    @sample.command()
    @with_settings(_Sample)
    def show(**settings: Any) -> None:
        typer.echo(_Sample(**settings).model_dump_json())

    return sample


def test_each_field_is_an_option_with_its_default_and_its_environment_variable() -> None:
    runner = CliRunner()
    given = runner.invoke(_sample_app(), ["--name", "a", "--count", "5", "--lease", "2m"], env={})
    assert given.exit_code == 0, given.output
    assert _Sample.model_validate_json(given.output) == _Sample(
        name="a", count=5, lease=timedelta(minutes=2)
    )
    from_env = runner.invoke(
        _sample_app(), [], env={"KAIROS_SAMPLE_NAME": "b", "KAIROS_COUNT": "7", "KAIROS_HOME": "/x"}
    )
    assert from_env.exit_code == 0, from_env.output
    assert _Sample.model_validate_json(from_env.output) == _Sample(
        name="b", count=7, home=Path("/x")
    )


def test_a_required_setting_left_out_is_a_usage_error_naming_its_flag() -> None:
    result = CliRunner().invoke(_sample_app(), [], env={})
    assert result.exit_code == 2
    assert "--name" in result.output


@pytest.mark.parametrize(
    ("command", "model", "derived"),
    [
        ("ticker", TickerSettings, set()),
        ("executor", ExecutorSettings, {"kinds"}),
        ("console", ConsoleSettings, set()),
    ],
)
def test_each_service_command_offers_every_setting_with_its_docstring(
    command: str, model: type[ServiceSettings], derived: set[str]
) -> None:
    """`derived`: fields the command fills from options of its own (--kinds)."""
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    for name, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{name} has no docstring to show as its help"
        if name in derived:
            continue
        flag = setting_of(model, name).flag or f"--{name.replace('_', '-')}"
        assert flag in result.output, name
        assert " ".join(field.description.split())[:40] in shown, name


def test_an_option_whose_text_does_not_read_is_a_usage_error_saying_why() -> None:
    result = CliRunner().invoke(_sample_app(), ["--name", "a", "--lease", "90"], env={})
    assert result.exit_code == 2
    assert "--lease" in result.output
    assert "90" in result.output
