"""The values the CLI fuzz draws from: good and bad ones per kind of option, and bad files.

Each kind has values the command must accept and values it must refuse with a clear message;
which option takes which kind is read from the option's name (`OPTION_KINDS`), so an option added
later is fuzzed as text until it is named here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OPTION_KINDS = {
    "duration": (
        "--dedupe-retention",
        "--lease",
        "--shutdown-grace",
        "--offset-commit-interval",
        "--poll-interval",
        "--grace",
        "--early-tolerance",
        "--outcome-grace",
    ),
    "instant": ("--from", "--to", "--since", "--until"),
    "count": (
        "-n",
        "--limit",
        "--concurrency",
        "--replication-factor",
        "--min-insync-replicas",
        "--schedules-partitions",
    ),
    "milliseconds": ("--session-timeout-ms", "--max-clock-ahead-ms"),
    "port": ("--metrics-port",),
    "seconds": ("--timeout",),
    "schedules_file": ("-f",),
    "properties_file": ("--kafka-config",),
    "directory": ("--state-dir",),
    "log_level": ("--log-level",),
    "dedupe_url": ("--dedupe-url",),
    "handlers": ("--handlers",),
    "kinds": ("--kinds",),
    "role": ("role",),
    "run_id": ("run_id",),
}
KIND_OF = {name: kind for kind, names in OPTION_KINDS.items() for name in names}

_HUGE = "9" * 40
_LONG_TEXT = "x" * 5000
_TEXT_BAD = (
    "",
    " ",
    "ü🙂\u202e",
    _LONG_TEXT,
    "../../etc/passwd",
    "with space",
    "\t",
    "%s%n",
    "\x7f",
    "a\nb",
)

GOOD: dict[str, tuple[str, ...]] = {
    "duration": ("10s", "1m", "500ms", "2h", "1h30m", "90d"),
    "instant": ("now", "-10m", "-1h", "2026-12-01T00:00:00Z", "2026-12-01T03:00:00-04:00"),
    "count": ("1", "3", "12"),
    "milliseconds": ("3000", "10000"),
    "port": ("0",),
    "seconds": ("0.5", "1"),
    "log_level": ("INFO", "debug", "WARNING"),
    "dedupe_url": ("sqlite:////tmp/fuzz-cli-dedupe.db",),
    "handlers": ("kairos.services.executor:Handlers",),
    "kinds": ("noop", "noop,shell"),
    "role": ("ticker", "executor", "producer", "auditor", "operator"),
    "run_id": ("fuzzcli-1@2026-12-01T00:00:00Z",),
    "text": ("fuzzcli-1", "team-a", "fuzzcli.every-minute"),
}
BAD: dict[str, tuple[str, ...]] = {
    "duration": (
        "",
        "10",
        "-5s",
        "1x",
        "ten seconds",
        f"{_HUGE}d",
        "1e3s",
        "٣s",
        "1.5.5s",
        "P1D",
        "0s",
        "NaN",
    ),
    "instant": (
        "yesterday",
        "2026-13-01T00:00:00Z",
        "2026-12-01T00:00:00",
        "-",
        "+10m",
        "9999-12-31T23:59:59Z",
        "0001-01-01T00:00:00Z",
        f"-{_HUGE}d",
        "",
        "১২:০০",
        "2026-02-30T00:00:00Z",
    ),
    "count": ("0", "-1", "abc", "1.5", _HUGE, "", "٣"),
    "milliseconds": ("0", "-1", "abc", _HUGE, "1e9"),
    "port": ("-1", "70000", "abc", _HUGE),
    "seconds": ("0", "-1", "abc", "nan", "inf", "1e400", ""),
    "log_level": ("LOUD", "", "info ", "50", "NOTSET"),
    "dedupe_url": (
        "mysql://x/y",
        "sqlite:///no/such/dir/x.db",
        "postgresql://127.0.0.1:1/db",
        "",
        "::",
    ),
    "handlers": ("no_such_module:x", "os:path", "json", ":", "kairos.cli.app:app"),
    "kinds": ("", ",,,", "teleport", "python"),
    "role": ("wizard", "", "TICKER"),
    "run_id": ("no-instant", "@", "x@2026-13-01T00:00:00Z", _LONG_TEXT, ""),
    "directory": ("", "/proc/1/no-such-dir", "/dev/null/state"),
    "text": _TEXT_BAD,
}


def schedule_documents(rng: random.Random) -> dict[str, bytes]:
    """Schedules files, named by what is wrong with them ('valid' has nothing wrong)."""

    def yaml_of(entries: object) -> bytes:
        return json.dumps({"schedules": entries}).encode()  # JSON is YAML

    one = {"id": "fuzzcli.every-minute", "cron": "* * * * *", "job": {"kind": "noop"}}
    return {
        "valid": yaml_of([one]),
        "garbage bytes": rng.randbytes(400),
        "invalid yaml": b"schedules: [\n  - id: x\n  cron: : :\n",
        "empty": b"",
        "a scalar": b"just a string\n",
        "a list of numbers": b"schedules:\n  - 1\n  - 2\n",
        "wrong types": yaml_of([{"id": 5, "cron": ["*"], "max_attempts": "many", "labels": 3}]),
        "huge values": yaml_of([{**one, "max_attempts": 10**30, "description": "x" * 600_000}]),
        "huge cron": yaml_of([{**one, "cron": "* " * 50_000}]),
        "unicode ids": yaml_of([{**one, "id": "ü🙂\u202e"}]),
        "unknown field": yaml_of([{**one, "colour": "blue"}]),
        "duplicate ids": yaml_of([one, one]),
        "alias bomb": _alias_bomb(),
        "deep nesting": b"schedules: " + b"[" * 5000 + b"]" * 5000 + b"\n",
        "utf-16": json.dumps({"schedules": [one]}).encode("utf-16"),
        "extra top-level key": json.dumps({"schedules": [one], "more": 1}).encode(),
        "not a list": b"schedules: {id: x}\n",
        "bad timezone": yaml_of([{**one, "timezone": "Mars/Olympus"}]),
        "year 10000": yaml_of([{"id": "fuzzcli.far", "at": "10000-01-01T00:00:00Z"}]),
        "jitter overflow": yaml_of([{**one, "jitter": f"{_HUGE}d"}]),
    }


def _alias_bomb() -> bytes:
    """The billion-laughs shape: nine levels of nine aliases; a loader that expands it hangs."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        refs = ", ".join(f"*a{level - 1}" for _ in range(9))
        lines.append(f"a{level}: &a{level} [{refs}]")
    lines.append("schedules: *a8")
    return ("\n".join(lines) + "\n").encode()


def properties_documents(rng: random.Random) -> dict[str, bytes]:
    return {
        "valid": b"# no properties\n",
        "garbage bytes": rng.randbytes(200),
        "no equals sign": b"security.protocol\n",
        "unknown property": b"no.such.property=1\n",
        "bad value": b"security.protocol=bogus\n",
        "unicode": "sasl.username=ü🙂\n".encode(),
    }


def write_files(directory: Path, documents: dict[str, bytes], suffix: str) -> dict[str, str]:
    """Write each document; also a path that does not exist and one that is a directory."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for number, (what, content) in enumerate(sorted(documents.items())):
        path = directory / f"{number:02d}{suffix}"
        path.write_bytes(content)
        paths[what] = str(path)
    paths["missing file"] = str(directory / f"no-such-file{suffix}")
    paths["a directory"] = str(directory)
    return paths
