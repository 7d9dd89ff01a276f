"""`kairos concurrency set|remove|list`: how many runs of a team or a label run at once.

The limits live in the executors' dedupe store, so every executor sharing it keeps them, and a
change holds from the next start on without restarting anything (docs/teams.md). Give the
commands the executors' own --state-dir and --dedupe-url (or KAIROS_STATE_DIR, KAIROS_DEDUPE_URL).
A label group is one team's (`label:payments/warehouse=eu`); a group spanning teams is made
shared by the administrator who limits it (`shared:warehouse=eu`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from kairos.cli.options import DedupeUrlOption, ExecutorStateDirOption, fail
from kairos.cli.output import JsonAliasOption, OutputOption, chosen, print_table, render
from kairos.core.errors import KairosError
from kairos.services.executor.settings import dedupe_store_url
from kairos.streams.dedupe import SQLITE_SCHEME, open_dedupe_store
from kairos.streams.dedupe.base import DedupeStore

app = typer.Typer(
    help="Limit how many runs of an owner or a label run at once, across all executors.",
    no_args_is_help=True,
)

GroupArgument = Annotated[
    str,
    typer.Argument(
        help="owner:OWNER (a team's runs), label:OWNER/KEY=VALUE (a team's runs of schedules "
        "with the label) or shared:KEY=VALUE (every team's runs of schedules with the label), "
        "e.g. owner:payments, label:payments/warehouse=eu or shared:warehouse=eu."
    ),
]
_T = TypeVar("_T")


def _with_store(state_dir: Path, dedupe_url: str | None, use: Callable[[DedupeStore], _T]) -> _T:
    url = dedupe_store_url(state_dir, dedupe_url)
    if url.startswith(SQLITE_SCHEME) and not Path(url.removeprefix(SQLITE_SCHEME)).exists():
        # Opening would create an empty store that no executor reads: a typo would go unseen.
        raise fail(
            f"no dedupe store at {url.removeprefix(SQLITE_SCHEME)}; give the executors' own "
            "--state-dir or --dedupe-url (an executor creates its store when it first starts)"
        )
    try:
        store = open_dedupe_store(url)
        try:
            return use(store)
        finally:
            store.close()
    except KairosError as error:
        raise fail(str(error)) from None


@app.command("set")
def set_limit(
    group: GroupArgument,
    max_running: Annotated[
        int, typer.Argument(help="At most this many of the group's runs at once (1 or more).")
    ],
    state_dir: ExecutorStateDirOption,
    dedupe_url: DedupeUrlOption = None,
) -> None:
    """Limit a group; runs beyond the limit wait, in their due order, for a place."""
    now = datetime.now(UTC)
    _with_store(state_dir, dedupe_url, lambda s: s.set_concurrency_limit(group, max_running, now))
    typer.echo(f"{group}: at most {max_running} run(s) at once, from the next start on")


@app.command("remove")
def remove_limit(
    group: GroupArgument,
    state_dir: ExecutorStateDirOption,
    dedupe_url: DedupeUrlOption = None,
) -> None:
    """Lift a group's limit: its waiting runs start as executors have room."""
    if not _with_store(state_dir, dedupe_url, lambda s: s.remove_concurrency_limit(group)):
        raise fail(f"{group} has no limit; `kairos concurrency list` shows the limited groups")
    typer.echo(f"{group}: no longer limited")


@app.command("list")
def list_limits(
    state_dir: ExecutorStateDirOption,
    dedupe_url: DedupeUrlOption = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """Every limited group: its limit, its runs running now and those due but waiting."""
    chosen_output = chosen(output, as_json)
    statuses = _with_store(state_dir, dedupe_url, lambda s: s.concurrency(datetime.now(UTC)))
    document = {
        "groups": [
            {
                "group": s.group,
                "max_running": s.max_running,
                "running": s.running,
                "waiting": s.waiting,
            }
            for s in statuses
        ]
    }

    def table() -> None:
        if not statuses:
            typer.echo("no group is limited; `kairos concurrency set owner:TEAM N` limits one")
            return
        rows = [[s.group, str(s.max_running), str(s.running), str(s.waiting)] for s in statuses]
        print_table(["GROUP", "LIMIT", "RUNNING", "WAITING"], rows)

    render(document, chosen_output, table)
