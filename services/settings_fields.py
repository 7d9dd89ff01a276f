"""How a service's settings reach it: each field of a settings model is one command-line option
and one environment variable, derived from the field (`kairos.cli.settings_options`).

A field says here only what its name and type cannot: an environment variable other than
`KAIROS_<FIELD>` (the names deployments already use), a flag other than `--<field-name>`, or how
to read its text. Bounds are the field's own, checked by the model. Its help is its docstring:
one place documents each setting for `--help`, the docs and the code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True, slots=True)
class Setting:
    """Where a settings field differs from the derived option and variable."""

    env: str | None = None
    """The environment variable; `None`: `KAIROS_<FIELD>`."""
    flag: str | None = None
    """The option; `None`: `--<field-name>`, underscores as dashes."""
    parse: Callable[[str], Any] | None = None
    """Reads the option's text, for a type a flag cannot carry as is (durations, lists)."""
    metavar: str | None = None
    """What the help shows for the value, where the type's name would not say."""


class ServiceSettings(BaseModel):
    """A service's settings: frozen once read at the CLI edge, each field documented by its
    docstring (the help of its option)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


def setting_of(model: type[BaseModel], name: str) -> Setting:
    """The `Setting` a field is annotated with, or the derived one."""
    found = [item for item in model.model_fields[name].metadata if isinstance(item, Setting)]
    return found[0] if found else Setting()
