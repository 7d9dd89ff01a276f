"""What a release is made of agrees with pyproject.toml, the one place its facts are written.

The version is written once, in pyproject.toml; the files that must name it without reading it
(the image's label default, the image tags the deploy files pull) are held equal here, so a
version bump that forgets one fails. The lock files pin what pyproject.toml asks for (`make lock`
refreshes them), the changelog has an entry for the version naming the schema history version
it writes, and the licence file is the licence the metadata declares.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPOSITORY = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
VERSION: str = PYPROJECT["project"]["version"]


def _pins(lock: Path) -> dict[str, set[str]]:
    """Name → every version the lock pins for it (a universal lock may split by marker)."""
    pins: dict[str, set[str]] = {}
    for name, version in re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", lock.read_text(), re.MULTILINE):
        pins.setdefault(canonicalize_name(name), set()).add(version)
    return pins


def _unmet(requirements: list[str], lock: Path) -> list[str]:
    pins = _pins(lock)
    unmet = []
    for text in requirements:
        requirement = Requirement(text)
        versions = pins.get(canonicalize_name(requirement.name), set())
        if not versions or not all(requirement.specifier.contains(v) for v in versions):
            unmet.append(f"{text} (locked: {sorted(versions) or 'nothing'})")
    return unmet


def test_the_lock_pins_every_runtime_dependency_and_the_postgres_extra() -> None:
    project = PYPROJECT["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["postgres"]]
    unmet = _unmet(wanted, REPOSITORY / "requirements.lock")
    assert not unmet, f"requirements.lock is stale, run `make lock`: {unmet}"


def test_the_build_lock_pins_the_build_backend() -> None:
    unmet = _unmet(PYPROJECT["build-system"]["requires"], REPOSITORY / "requirements-build.lock")
    assert not unmet, f"requirements-build.lock is stale, run `make lock`: {unmet}"


def test_every_lock_line_carries_hashes() -> None:
    for lock in ("requirements.lock", "requirements-build.lock"):
        entries = re.split(r"\n(?=[A-Za-z0-9])", (REPOSITORY / lock).read_text())
        pinned = [e for e in entries if "==" in e.split("\n")[0]]
        assert pinned, f"{lock} pins nothing"
        unhashed = [e.split()[0] for e in pinned if "--hash=sha256:" not in e]
        assert not unhashed, f"{lock}: pins without hashes {unhashed}"


def test_the_image_and_the_deploy_files_name_the_one_version() -> None:
    dockerfile = (REPOSITORY / "compose" / "Dockerfile").read_text()
    assert re.search(rf"^ARG KAIROS_VERSION={re.escape(VERSION)}$", dockerfile, re.MULTILINE)
    compose = yaml.safe_load((REPOSITORY / "compose" / "docker-compose.yml").read_text())
    kairos_images = {
        service["image"]
        for service in compose["services"].values()
        if service.get("image", "").startswith("kairos:")
    }
    assert kairos_images == {f"kairos:{VERSION}"}
    kustomization = yaml.safe_load(
        (REPOSITORY / "deploy" / "kubernetes" / "kustomization.yaml").read_text()
    )
    assert {i["newTag"] for i in kustomization["images"] if i["name"] == "kairos"} == {VERSION}


def test_the_changelog_names_this_version_and_the_schema_history_it_writes() -> None:
    history = max(
        int(p.name[1:]) for p in (REPOSITORY / "schemas" / "history").iterdir() if p.is_dir()
    )
    changelog = (REPOSITORY / "CHANGELOG.md").read_text()
    entry = re.search(rf"^## {re.escape(VERSION)}\b.*?(?=^## |\Z)", changelog, re.M | re.S)
    assert entry, f"CHANGELOG.md has no `## {VERSION}` entry"
    assert f"Schema history **v{history}**" in entry.group(0)
    assert "Upgrade notes" in entry.group(0)


def test_the_licence_file_is_the_declared_licence() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (REPOSITORY / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text
