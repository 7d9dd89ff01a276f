"""Kairos installed the two ways it leaves this repository, each in a venv of its own.

- As a user installs it: the wheel alone, its dependencies resolved from the package index by
  pip, in a venv that cannot see this development environment (no system site packages, no path
  entry, no PYTHONPATH), run from a directory outside the source tree.
- As the image installs it: compose/wheels.sh and compose/install.sh, the Dockerfile's own
  steps, run unchanged with a clean venv's `python` first on PATH, from a copy of the build
  context. What gets installed must be exactly what requirements.lock pins.

Each then runs `kairos` against the test broker, so a dependency missing from the distribution,
a data file missing from the wheel or a lock that no longer installs fails here, not on a
user's machine. The package index is reached through pip's cache where it holds the files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from kairos.streams.kafka.settings import KafkaSettings

DISTRIBUTION = "kairos-scheduler"
REPOSITORY = Path(__file__).resolve().parents[2]
# The wheel's sources; `kairos/` links the other folders under one namespace.
SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "kairos",
    "core",
    "streams",
    "services",
    "cli",
    "schemas",
    "devinfra",
)
# What compose/Dockerfile copies into its build stage beyond the wheel's sources.
IMAGE_CONTEXT = (*SOURCES, "compose", "requirements.lock", "requirements-build.lock")
INSTALL_TIMEOUT_S = 600


def _version() -> str:
    version: str = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]["version"]
    return version


def _copy_tree(names: tuple[str, ...], target: Path) -> Path:
    target.mkdir()
    for name in names:
        source = REPOSITORY / name
        if source.is_dir():
            shutil.copytree(
                source, target / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(source, target / name)
    return target


def _clean_environment(venv: Path | None = None) -> dict[str, str]:
    """This process's environment without what would let a venv see the development one."""
    environment = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    if venv is not None:
        environment["PATH"] = f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
        environment["VIRTUAL_ENV"] = str(venv)
    return environment


def _run(cwd: Path, *command: str | Path, venv: Path | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=_clean_environment(venv),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _fresh_venv(path: Path) -> Path:
    """A venv with pip and nothing else: it sees neither the system's nor this venv's packages."""
    # The interpreter this venv was made from, not this venv's: `-m venv` from inside a venv
    # would still be a clean one, but saying so costs nothing.
    _run(path.parent, sys._base_executable, "-m", "venv", path)  # type: ignore[attr-defined]
    return path


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    tree = _copy_tree(SOURCES, work / "source")
    _run(
        work,
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        work / "wheels",
        tree,
    )
    (built,) = (work / "wheels").glob("*.whl")
    return built


def test_the_wheel_holds_only_the_kairos_namespace_under_its_distribution_name(
    wheel: Path,
) -> None:
    assert wheel.name.startswith(f"kairos_scheduler-{_version()}-")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert f"Name: {DISTRIBUTION}\n" in archive.read(metadata).decode()
        assert {n.split("/")[0] for n in names} == {"kairos", metadata.split("/")[0]}
        # Data files the commands read at run time.
        assert f"{metadata.rsplit('/', 1)[0]}/licenses/LICENSE" in names
        assert "kairos/cli/sample_schedules.yaml" in names
        assert "kairos/services/console/templates/base.html" in names
        assert any(re.fullmatch(r"kairos/schemas/history/v\d+/.+\.avsc", n) for n in names)


def test_a_user_installs_the_wheel_from_the_index_and_runs_kairos(
    wheel: Path, kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    venv = _fresh_venv(tmp_path / "venv")
    _run(
        tmp_path,
        venv / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        wheel,
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    kairos = venv / "bin" / "kairos"

    assert _run(outside, kairos, "--version") == f"kairos {_version()}\n"
    sample = _run(
        outside,
        venv / "bin" / "python",
        "-c",
        "import importlib.resources as r; print(r.files('kairos.cli') / 'sample_schedules.yaml')",
    ).strip()
    assert Path(sample).is_relative_to(venv), f"the sample came from {sample}, not the wheel"
    assert "sample.every-minute" in _run(outside, kairos, "preview", "-f", sample, "-n", "1")

    applied = _run(
        outside,
        kairos,
        "--bootstrap-servers",
        kafka_settings.bootstrap_servers,
        "--topic-prefix",
        kafka_settings.topic_prefix,
        "--schedules-partitions",
        str(kafka_settings.schedules_partitions),
        "apply",
        "-f",
        sample,
        "--changed-by",
        "install-test",
    )
    assert "sample.every-minute" in applied


def _locked_versions(lock: Path) -> dict[str, str]:
    """Name → version of each line of requirements.lock this platform installs."""
    pins = re.findall(
        r"^([A-Za-z0-9._-]+)==([^\s;\\]+)(?:\s*;\s*([^\\\n]+))?",
        lock.read_text(),
        flags=re.MULTILINE,
    )
    from packaging.markers import Marker  # noqa: PLC0415 (a test-only dependency)

    return {
        re.sub(r"[-_.]+", "-", name).lower(): version
        for name, version, marker in pins
        if not marker or Marker(marker.strip()).evaluate()
    }


def test_the_image_installs_exactly_the_locked_versions_and_runs_kairos(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    context = _copy_tree(IMAGE_CONTEXT, tmp_path / "context")
    builder = _fresh_venv(tmp_path / "builder")
    # FROM python AS wheels; WORKDIR /src; COPY . .; RUN sh compose/wheels.sh /wheels
    _run(context, "sh", "compose/wheels.sh", tmp_path / "wheels", venv=builder)

    # The runtime stage: COPY requirements.lock compose/install.sh ./; RUN sh install.sh ...
    stage = tmp_path / "install"
    stage.mkdir()
    shutil.copy2(context / "requirements.lock", stage)
    shutil.copy2(context / "compose" / "install.sh", stage)
    label = re.search(
        r"^ARG KAIROS_VERSION=(\S+)$",
        (context / "compose" / "Dockerfile").read_text(),
        flags=re.MULTILINE,
    )
    assert label is not None, "compose/Dockerfile no longer sets ARG KAIROS_VERSION"
    runtime = _fresh_venv(tmp_path / "runtime")
    _run(stage, "sh", "install.sh", tmp_path / "wheels", label.group(1), venv=runtime)

    listed = json.loads(
        _run(
            stage,
            runtime / "bin" / "python",
            "-m",
            "pip",
            "list",
            "--format=json",
            "--exclude",
            "pip",
            "--exclude",
            "setuptools",
        )
    )
    installed = {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in listed}
    assert installed == {
        **_locked_versions(REPOSITORY / "requirements.lock"),
        DISTRIBUTION: _version(),
    }

    listing = _run(
        stage,
        runtime / "bin" / "kairos",
        "--bootstrap-servers",
        kafka_settings.bootstrap_servers,
        "--topic-prefix",
        kafka_settings.topic_prefix,
        "schedules",
        "list",
        "-o",
        "json",
    )
    assert json.loads(listing) == []
