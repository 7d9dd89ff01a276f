"""The distribution declares exactly what the product imports.

CI installs the dev extra, so a module the product imports but only a dev or bench dependency
provides passes every other test and breaks `pip install kairos-scheduler` (croniter did). This
reads every import of the product's packages, maps each third-party module to the distribution
that provides it here, and fails naming the module, its file and the package to declare. The
reverse holds too: a declared runtime dependency the product never imports is named with the
reason it is still needed, or it is dead weight on every install.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("core", "streams", "services", "cli", "devinfra")
FIRST_PARTY = {"kairos", *PRODUCT_PACKAGES, "schemas"}
# Extras a user installs on purpose; the others serve development only.
DEVELOPMENT_EXTRAS = {"dev", "bench"}

NEEDED_WITHOUT_IMPORT = {
    "tzdata": "zoneinfo reads its time zone data where the system has none (slim images)",
    "jinja2": "starlette.templating renders the console's pages with it",
    "python-multipart": "starlette parses the console's forms with it",
}


def _normalised(requirement: str) -> str:
    name = re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], set[str]]:
    """The runtime dependencies, and those of the extras a user may install."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    runtime = {_normalised(d) for d in project["dependencies"]}
    extras = {
        _normalised(d)
        for extra, requirements in project["optional-dependencies"].items()
        if extra not in DEVELOPMENT_EXTRAS
        for d in requirements
    }
    return runtime, extras - {"kairos-scheduler"}


def _product_files(root: Path) -> Iterator[Path]:
    for package in PRODUCT_PACKAGES:
        yield from sorted((root / package).rglob("*.py"))
    # kairos/ holds the namespace's own modules beside its links to the folders above.
    yield from sorted(p for p in (root / "kairos").glob("*.py") if not p.is_symlink())


def third_party_imports(files: Iterator[Path], root: Path = REPOSITORY) -> dict[str, set[str]]:
    """Each third-party top-level module imported anywhere in `files` (function bodies
    included), with the files importing it, relative to `root`."""
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY | {"__future__"}:
                    found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


def undeclared(imports: dict[str, set[str]], declared: set[str]) -> list[str]:
    """One line per imported module that no declared distribution provides."""
    providers = metadata.packages_distributions()
    problems = []
    for module, files in sorted(imports.items()):
        where = ", ".join(sorted(files)[:3])
        distributions = {_normalised(d) for d in providers.get(module, [])}
        if not distributions:
            problems.append(
                f"{module} (imported by {where}) is provided by no installed distribution: "
                "install the package that provides it and declare it in pyproject.toml"
            )
        elif not distributions & declared:
            problems.append(
                f"{module} (imported by {where}) comes from {' or '.join(sorted(distributions))}, "
                "which no runtime dependency declares: add it to [project] dependencies "
                "(or to the extra of the feature that needs it)"
            )
    return problems


def test_every_module_the_product_imports_is_a_declared_dependency() -> None:
    runtime, extras = _declared()
    problems = undeclared(third_party_imports(_product_files(REPOSITORY)), runtime | extras)
    assert not problems, "\n".join(problems)


def test_every_runtime_dependency_is_imported_or_its_need_stated() -> None:
    runtime, _ = _declared()
    providers = metadata.packages_distributions()
    imported = {
        _normalised(d)
        for module in third_party_imports(_product_files(REPOSITORY))
        for d in providers.get(module, [])
    }
    unused = sorted(runtime - imported - set(NEEDED_WITHOUT_IMPORT))
    assert not unused, f"declared but never imported, and no reason stated: {unused}"
    stale = sorted(set(NEEDED_WITHOUT_IMPORT) - runtime)
    assert not stale, f"NEEDED_WITHOUT_IMPORT names what pyproject.toml no longer declares: {stale}"


def test_a_module_only_a_development_extra_provides_is_named(tmp_path: Path) -> None:
    # hypothesis is installed here by the dev extra: exactly the trap croniter fell into.
    source = tmp_path / "job.py"
    source.write_text("def f():\n    import hypothesis.strategies\n    import json\n")
    imports = third_party_imports(iter([source]), root=tmp_path)
    assert imports == {"hypothesis": {"job.py"}}
    (problem,) = undeclared(imports, _declared()[0])
    assert problem.startswith("hypothesis (imported by job.py) comes from hypothesis")
    assert "add it to [project] dependencies" in problem
