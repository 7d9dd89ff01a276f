"""`-o table|json|yaml`: the one output option of the reading commands, and its rendering.

Every reading command builds one document (plain dicts, lists and instants) and hands it here
with the function that prints its table: JSON and YAML are then the same document, spelt the
same way (instants as `kairos.cli.reading.text` spells them) whatever the command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml

from kairos.cli.reading import jsonable


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


OutputOption = Annotated[
    Format | None,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        help="table (for people), json or yaml (for scripts).",
        show_default=False,
    ),
]
JsonAliasOption = Annotated[
    bool, typer.Option("--json", help="The same as -o json (kept for existing scripts).")
]


def chosen(output: Format | None, as_json: bool, default: Format = Format.TABLE) -> Format:
    """The format `-o` and `--json` ask for; both given and different is a usage error."""
    if as_json and output not in (None, Format.JSON):
        raise typer.BadParameter(
            f"--json asks for json but -o asks for {output}; give one of them",
            param_hint="-o/--json",
        )
    if as_json:
        return Format.JSON
    return output or default


def render(document: Any, output: Format, table: Callable[[], None]) -> None:
    """Print `document` as JSON or YAML, or call `table` to print it for people."""
    if output is Format.JSON:
        typer.echo(json.dumps(jsonable(document), indent=2))
    elif output is Format.YAML:
        typer.echo(as_yaml(document))
    else:
        table()


def as_yaml(document: Any) -> str:
    """Block-style YAML in the document's own key order (definitions read as they were written)."""
    text = yaml.safe_dump(jsonable(document), sort_keys=False, allow_unicode=True)
    return text.rstrip()


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print `table_lines` on standard output."""
    for line in table_lines(header, rows):
        typer.echo(line)


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Plain columns, each as wide as its widest cell, two spaces apart: easy to `awk`."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
