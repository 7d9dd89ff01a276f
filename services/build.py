"""Which build of Kairos runs: the version pip recorded for the distribution.

The version has one source, pyproject.toml; `kairos --version` and every service's
`kairos_build_info` metric read it from the installed distribution's metadata.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Info

DISTRIBUTION = "kairos-scheduler"
"""The distribution's name on PyPI (the import name and the command stay `kairos`)."""


def installed_version() -> str:
    """The version pip installed, read from the package metadata (one source: pyproject.toml)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        # Run from a source tree that was never installed: say so rather than guess a number.
        return "unknown (not installed; `pip install -e .` records the version)"


def register_build_info(registry: CollectorRegistry) -> None:
    """`kairos_build_info{version="…"} 1` in `registry`: which build a scraped process runs."""
    Info("kairos_build", "The Kairos build this process runs.", registry=registry).info(
        {"version": installed_version()}
    )
