"""A service command's options, derived from its settings model: one option and one environment
variable per field (`kairos.services.settings_fields`), the field's docstring as its help and
the model's default as its own, so every setting is reachable and described once.

The values reach the command as keyword arguments named after the fields; the model checks
them, and a problem is reported by field (`kairos.cli.options.invalid_settings`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel

from kairos.core.errors import KairosError
from kairos.services.settings_fields import setting_of

Command = TypeVar("Command", bound=Callable[..., None])


def settings_parameters(
    model: type[BaseModel], skip: frozenset[str] = frozenset()
) -> list[inspect.Parameter]:
    """An option for each field of `model` but those in `skip` (fields the command fills
    itself), keyword-only, in the model's order."""
    parameters = []
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        setting = setting_of(model, name)
        default = field.get_default(call_default_factory=True)
        option = typer.Option(
            setting.flag or f"--{name.replace('_', '-')}",
            envvar=setting.env or f"KAIROS_{name.upper()}",
            help=field.description,
            parser=None if setting.parse is None else _from_text(setting.parse),
            metavar=setting.metavar,
            show_default=default is not None and setting.parse is None,
        )
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if field.is_required() else default,
                annotation=Annotated[_option_type(field.annotation, setting.parse), option],
            )
        )
    return parameters


def _from_text(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        # Click converts a default as it converts text: a value of the field's type is kept.
        if not isinstance(value, str):
            return value
        try:
            return parse(value)
        except (ValueError, KairosError) as error:
            raise typer.BadParameter(str(error)) from None

    return read


def _option_type(annotation: Any, parse: Callable[[str], Any] | None) -> Any:
    # A parsed option is read as text by typer and handed to the parser.
    return str if parse is not None else annotation


def with_settings(
    model: type[BaseModel], skip: frozenset[str] = frozenset()
) -> Callable[[Command], Command]:
    """Give a command whose settings arrive as `**settings` an option for each field of
    `model` (but `skip`), after its own parameters."""

    def decorate(command: Command) -> Command:
        signature = inspect.signature(command, eval_str=True)
        own = [
            parameter
            for parameter in signature.parameters.values()
            if parameter.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*own, *settings_parameters(model, skip)]
        )
        return command

    return decorate
