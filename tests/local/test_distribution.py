"""The wheel users get from `pip install kairos-scheduler`: its name, its command, its data files.

Built from a copy of the source tree without build isolation, and installed into a fresh venv
whose only other packages are this venv's (through a path entry), so it runs offline. The
installed `kairos` command must work from the wheel alone: the Avro schemas and the sample
schedules are package data, and a missing one fails here rather than on a user's machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

DISTRIBUTION = "kairos-scheduler"
REPOSITORY = Path(__file__).resolve().parents[2]
# What the wheel is built from; `kairos/` links the other folders under one namespace.
SOURCES = (
    "pyproject.toml",
    "README.md",
    "kairos",
    "core",
    "streams",
    "services",
    "cli",
    "schemas",
    "devinfra",
)


def _build_wheel(tmp_path: Path) -> Path:
    tree = tmp_path / "source"
    tree.mkdir()
    for name in SOURCES:
        source = REPOSITORY / name
        if source.is_dir():
            shutil.copytree(
                source, tree / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(source, tree / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(tree),
        ],
        check=True,
    )
    (wheel,) = wheels.glob("*.whl")
    return wheel


def _fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A venv with the wheel installed, borrowing only third-party packages from this one."""
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
    )
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # A plain path entry: the .pth files there (this venv's editable `kairos`) are not run, so
    # `import kairos` can only find the wheel's copy.
    (site_packages / "borrowed.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return target


def _run(cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Run in the fresh venv as a user would: without this test run's PYTHONPATH."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        list(command),
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_wheel_is_named_kairos_scheduler_and_its_kairos_command_runs(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    assert wheel.name.startswith("kairos_scheduler-")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert f"Name: {DISTRIBUTION}\n" in archive.read(metadata).decode()
        # Only the import namespace `kairos` lands in site-packages.
        assert {n.split("/")[0] for n in archive.namelist()} == {"kairos", metadata.split("/")[0]}

    target = _fresh_venv(tmp_path, wheel)
    kairos = str(target / "bin" / "kairos")
    shown = _run(tmp_path, kairos, "--help")
    assert shown.returncode == 0, shown.stderr
    assert "ticker" in shown.stdout and "executor" in shown.stdout
    # `kairos dev` starts its brokers from the development infrastructure package.
    dev_kafka = _run(tmp_path, kairos, "dev", "kafka", "--help")
    assert dev_kafka.returncode == 0, dev_kafka.stderr

    probe = (
        "import importlib.metadata as m, importlib.resources as r, kairos\n"
        "from kairos.streams.avro_schemas import load_catalog\n"
        "import kairos.devinfra.kafka_broker, kairos.devinfra.kafka_cluster\n"
        "load_catalog()\n"
        "print(kairos.__file__)\n"
        f"print(m.version({DISTRIBUTION!r}))\n"
        "print(r.files('kairos.cli') / 'sample_schedules.yaml')\n"
        "print((r.files('kairos.services.console') / 'templates' / 'base.html').is_file())\n"
    )
    found = _run(tmp_path, str(target / "bin" / "python"), "-c", probe)
    assert found.returncode == 0, found.stderr
    module, version, sample, console_templates = found.stdout.splitlines()
    assert console_templates == "True", "the console's page templates are not in the wheel"
    assert Path(module).is_relative_to(target), f"kairos imported from {module}, not the wheel"
    assert version == "0.1.0"
    # `kairos --version` reads the installed wheel's metadata, not a number kept in the code.
    assert _run(tmp_path, kairos, "--version").stdout == f"kairos {version}\n"

    preview = _run(tmp_path, kairos, "preview", "-f", sample, "-n", "1")
    assert preview.returncode == 0, preview.stderr
    assert "sample.every-minute" in preview.stdout
