"""The packages import only downward, and production code never imports development tools.

`core` is pure, `streams` builds on it, `services` on both; `devinfra` (the local brokers and
databases behind `kairos dev`, the tests and the benchmarks) is never imported by them, so a
deployment cannot come to depend on a launcher. Inside `streams`, each room (`kafka`, `wire`,
`state`, `readers`, `client`; `sql`, `dedupe`) imports only the rooms below it. The imports are read
with `ast` from the sources, so one inside a function or a relative one counts as much as one at
the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
NAMESPACE = REPOSITORY / "kairos"

# What each layered folder may import from the `kairos` namespace. `cli` is the top: it may
# import every package, so it has no line here.
ALLOWED_IMPORTS = {
    "core": {"core"},
    "streams": {"core", "streams"},
    "services": {"core", "streams", "services"},
    "devinfra": {"core", "streams", "devinfra"},
    "schemas": {"schemas"},
}
UNRESTRICTED = {"cli"}
PRODUCTION = ("core", "streams", "services")


# What each room of `streams/` may import from `kairos.streams`: the rooms below it. `sql` (the
# SQL layer) and `dedupe` (the executors' store on it) stand apart from the Kafka rooms.
STREAMS_ROOMS = {
    "kafka": {"kafka"},
    "wire": {"kafka", "wire"},
    "state": {"kafka", "wire", "state"},
    "readers": {"kafka", "wire", "readers"},
    "client": {"kafka", "wire", "readers", "client"},
    "sql": {"sql"},
    "dedupe": {"sql", "dedupe"},
}


def imported_packages(source: str, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, name) of every `kairos.<name>` the source imports; `package` is the dotted path of
    the folder holding the module (("kairos", "services", "ticker")), to resolve relative ones."""
    return [(line, parts[1]) for line, parts in imported_modules(source, package)]


def imported_modules(source: str, package: tuple[str, ...]) -> list[tuple[int, tuple[str, ...]]]:
    """(line, dotted parts) of every module under `kairos` the source imports (`package` as in
    `imported_packages`)."""
    found: list[tuple[int, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            dotted = [tuple(alias.name.split(".")) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = (*base, *(node.module or "").split(".")) if node.module else base
            # `from kairos import services` names the package in the imported names.
            names = [alias.name for alias in node.names]
            dotted = [(*module, name) for name in names] if module == ("kairos",) else [module]
        else:
            continue
        found.extend(
            (node.lineno, parts) for parts in dotted if len(parts) > 1 and parts[0] == "kairos"
        )
    return found


def violations(folder: str) -> list[str]:
    """Every import in `folder` of a package its layer may not use, as `file:line: name`."""
    root = REPOSITORY / folder
    sources = sorted(root.rglob("*.py"))
    assert sources, f"no Python sources under {root}: the layering table names a missing folder"
    wrong = []
    for path in sources:
        package = ("kairos", folder, *path.parent.relative_to(root).parts)
        for line, name in imported_packages(path.read_text(), package):
            if name not in ALLOWED_IMPORTS[folder]:
                wrong.append(f"{path.relative_to(REPOSITORY)}:{line}: kairos.{name}")
    return wrong


@pytest.mark.parametrize("folder", sorted(ALLOWED_IMPORTS))
def test_each_package_imports_only_the_layers_below_it(folder: str) -> None:
    wrong = violations(folder)
    assert not wrong, (
        f"{folder}/ may import only {sorted(ALLOWED_IMPORTS[folder])} from kairos, but:\n"
        + "\n".join(wrong)
    )


def streams_violations(room: str) -> list[str]:
    """Every import in `streams/<room>/` of a room of `streams/` it may not use."""
    root = REPOSITORY / "streams" / room
    sources = sorted(root.rglob("*.py"))
    assert sources, f"no Python sources under {root}: STREAMS_ROOMS names a missing room"
    wrong = []
    for path in sources:
        package = ("kairos", "streams", room, *path.parent.relative_to(root).parts)
        for line, parts in imported_modules(path.read_text(), package):
            if parts[1] == "streams" and (len(parts) < 3 or parts[2] not in STREAMS_ROOMS[room]):
                wrong.append(f"{path.relative_to(REPOSITORY)}:{line}: {'.'.join(parts)}")
    return wrong


@pytest.mark.parametrize("room", sorted(STREAMS_ROOMS))
def test_each_room_of_streams_imports_only_the_rooms_below_it(room: str) -> None:
    wrong = streams_violations(room)
    assert not wrong, (
        f"streams/{room}/ may import only {sorted(STREAMS_ROOMS[room])} of kairos.streams, but:\n"
        + "\n".join(wrong)
    )


def test_every_module_of_streams_sits_in_a_room_the_table_names() -> None:
    """A module at `streams/`'s own level, or a new room, would go unchecked."""
    streams = REPOSITORY / "streams"
    loose = sorted(path.name for path in streams.glob("*.py") if path.name != "__init__.py")
    rooms = {path.name for path in streams.iterdir() if (path / "__init__.py").exists()}
    assert not loose, f"modules outside a room of streams/: {loose}"
    assert rooms == set(STREAMS_ROOMS)


def test_a_room_importing_upward_is_caught() -> None:
    """The reader of rooms itself: `wire` importing the `readers` room, absolutely or relatively."""
    for statement in (
        "from kairos.streams.readers.history import read_history",
        "from ..readers import history",
        "import kairos.streams.readers.history",
    ):
        found = imported_modules(statement, ("kairos", "streams", "wire"))
        assert [parts[:3] for _, parts in found] == [("kairos", "streams", "readers")], statement


def test_no_production_package_may_import_devinfra() -> None:
    for folder in PRODUCTION:
        assert "devinfra" not in ALLOWED_IMPORTS[folder]


def test_the_table_covers_every_package_of_the_namespace() -> None:
    """A new top-level package must say where it sits, or its imports go unchecked."""
    linked = {path.name for path in NAMESPACE.iterdir() if path.is_symlink()}
    assert linked == set(ALLOWED_IMPORTS) | UNRESTRICTED


def test_the_sdk_modules_of_the_namespace_import_no_devinfra() -> None:
    """`kairos/client.py` and `kairos/__init__.py` are what producer apps import."""
    for path in NAMESPACE.glob("*.py"):
        names = {name for _, name in imported_packages(path.read_text(), ("kairos",))}
        assert "devinfra" not in names, f"{path.name} imports kairos.devinfra"


@pytest.mark.parametrize(
    "statement",
    [
        "import kairos.devinfra.kafka_broker",
        "from kairos.devinfra.postgres import LocalPostgres",
        "from kairos import devinfra",
        "from ... import devinfra",
        "from ...devinfra import kafka_broker",
        "def start():\n    from kairos.devinfra.kafka_broker import LocalKafka\n",
    ],
)
def test_every_spelling_of_an_import_is_caught(statement: str) -> None:
    """The reader itself: absolute, from the namespace, relative (from services/ticker/), and
    inside a function."""
    found = imported_packages(statement, ("kairos", "services", "ticker"))
    assert [name for _, name in found] == ["devinfra"]


def test_imports_of_other_distributions_are_not_kairos_packages() -> None:
    source = "import kairosx.devinfra\nfrom confluent_kafka import Producer\nimport kairos\n"
    assert imported_packages(source, ("kairos", "services")) == []
