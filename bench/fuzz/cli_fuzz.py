"""Generated `kairos` command lines, run and judged: no traceback, and a clear refusal.

The commands and their options are read from the typer application itself; values come from
`cli_inputs`. Each case starts from a command line that could work and breaks some of it (a bad
value, a missing or unknown option, a missing broker, a bad file), or none of it. Most run in
process (typer's CliRunner); `ticker` and `executor`, which run until stopped when their
arguments are good, run as processes stopped after a few seconds. `dev` is left out: it starts
and stops brokers on this machine. So are the shell-completion installers, which write to the
user's shell profile.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import typer

from bench.common import free_port
from bench.fuzz import cli_inputs
from bench.fuzz.services import TRACEBACK
from kairos.cli.app import app

EXCLUDED = ("dev",)
_NOT_FUZZED_OPTIONS = ("--install-completion", "--show-completion", "--help")
SERVICES = ("ticker", "executor")
SERVICE_SHARE = 0.03
"""Service cases are processes of a few seconds each: a small share of the cases."""
SERVICE_RUN_S = 20.0
"""A service still running after this long accepted its arguments (and waits for its broker).
Generous: on this shared machine a refusal took 4 s of start-up at a load average of 11."""
VERDICT_EXITS = {
    "apply": {1},
    "acls": {1},
    "partitions": {1},
    "audit verify": {1, 2},
    "topics describe": {1},
    "topics check": {1},
}
"""Exit codes some commands give as a verdict, with a report on stdout rather than an error
(docs/operations.md, "Exit codes"; `audit verify` reports an inconclusive verdict with 2)."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    flag: bool
    required: bool
    positional: bool


@dataclass(frozen=True)
class Case:
    command: str
    argv: list[str]
    broken: tuple[str, ...]
    """What was made wrong; empty when the command line should work."""


@dataclass
class CliOutcome:
    case: Case
    exit_code: int
    outcome: str
    passed: bool
    output_tail: str


@dataclass
class CliTally:
    cases: int = 0
    by_outcome: Counter[str] = field(default_factory=Counter)
    by_command: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    accepted_services: Counter[str] = field(default_factory=Counter)
    """For service cases that ran until stopped: what had been broken in them."""
    accepted_examples: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0


def command_params() -> dict[str, list[Param]]:
    """Every fuzzed command and its parameters, as the typer application declares them."""
    root = typer.main.get_command(app)
    found: dict[str, list[Param]] = {}

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                if not path and name in EXCLUDED:
                    continue
                walk(sub, [*path, name])
            return
        found[" ".join(path)] = [_param(p) for p in command.params if p.name != "help"]

    walk(root, [])
    found[""] = [_param(p) for p in root.params if p.opts[0] not in _NOT_FUZZED_OPTIONS]
    return found


def _param(param: Any) -> Param:
    positional = param.param_type_name == "argument"
    name = param.name if positional else param.opts[0]
    kind = cli_inputs.KIND_OF.get(name, "text")
    flag = bool(getattr(param, "is_flag", False))
    return Param(name, kind, flag, bool(param.required), positional)


class CaseBuilder:
    """Seeded command lines against one live deployment, a closed port or garbage addresses."""

    def __init__(self, rng: random.Random, bootstrap: str, prefix: str, files: Path) -> None:
        self.rng = rng
        self.params = command_params()
        self.commands = sorted(c for c in self.params if c)
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.closed = f"127.0.0.1:{free_port()}"
        self.schedule_files = cli_inputs.write_files(
            files / "schedules", cli_inputs.schedule_documents(rng), ".yaml"
        )
        self.properties_files = cli_inputs.write_files(
            files / "properties", cli_inputs.properties_documents(rng), ".properties"
        )
        self.state_dir = files / "state"

    def cases(self, count: int) -> Iterator[Case]:
        for _ in range(count):
            yield self.case()

    def case(self) -> Case:
        rng = self.rng
        services = rng.random() < SERVICE_SHARE
        command = rng.choice(
            SERVICES if services else [c for c in self.commands if c not in SERVICES]
        )
        broken: list[str] = []
        argv = self._root(broken) + command.split()
        for param in self.params[command]:
            argv += self._param_args(param, broken)
        if rng.random() < 0.1:
            argv, what = self._garbled(argv)
            broken.append(what)
        if command in SERVICES and not broken:
            # A good service command line runs until stopped: break one of its values, always.
            param = rng.choice([p for p in self.params[command] if p.kind in cli_inputs.BAD])
            argv += [param.name, rng.choice(cli_inputs.BAD[param.kind])]
            broken.append(f"bad {param.name}")
        return Case(command, argv, tuple(broken))

    def _root(self, broken: list[str]) -> list[str]:
        rng = self.rng
        draw = rng.random()
        if draw < 0.6:
            bootstrap = self.bootstrap
        elif draw < 0.85:
            bootstrap = self.closed
            broken.append("missing broker")
        else:
            bootstrap = rng.choice(["", "::", "host:notaport", "ü:1", "a" * 500, "127.0.0.1:99999"])
            broken.append("bad --bootstrap-servers")
        # Short timeouts: a missing broker costs a case its timeout, and a live one answers in ms.
        argv = ["--bootstrap-servers", bootstrap, "--timeout", rng.choice(["0.2", "0.3"])]
        if rng.random() < 0.05:
            argv[-1] = rng.choice(cli_inputs.BAD["seconds"])
            broken.append("bad --timeout")
        prefix = self.prefix
        if rng.random() < 0.1:
            prefix = rng.choice(["", " bad", "ü.", "x" * 300, "a/b.", "fuzzcli-empty."])
            broken.append("odd --topic-prefix")
        argv += ["--topic-prefix", prefix]
        if rng.random() < 0.1:
            argv += ["--schedules-partitions", rng.choice(["0", "-3", "x", "99999", "12"])]
            broken.append("odd --schedules-partitions")
        if rng.random() < 0.05:
            what = rng.choice(sorted(self.properties_files))
            argv += ["--kafka-config", self.properties_files[what]]
            broken.append(f"--kafka-config {what}")
        return argv

    def _param_args(self, param: Param, broken: list[str]) -> list[str]:
        rng = self.rng
        if param.required and rng.random() < 0.05:
            broken.append(f"missing {param.name}")
            return []
        if not param.required and rng.random() > 0.3:
            return []
        if param.flag:
            return [param.name]
        value = self._value(param, broken)
        return [value] if param.positional else [param.name, value]

    def _value(self, param: Param, broken: list[str]) -> str:
        rng = self.rng
        if param.kind == "schedules_file":
            what = rng.choice(sorted(self.schedule_files))
            if what != "valid":
                broken.append(f"-f {what}")
            return self.schedule_files[what]
        if param.kind == "properties_file":
            return self.properties_files["valid"]
        if param.kind == "directory":
            return str(self.state_dir)
        if rng.random() < 0.3:
            broken.append(f"bad {param.name}")
            return rng.choice(cli_inputs.BAD[param.kind])
        return rng.choice(cli_inputs.GOOD[param.kind])

    def _garbled(self, argv: list[str]) -> tuple[list[str], str]:
        rng = self.rng
        choice = rng.randrange(4)
        if choice == 0:
            return [*argv, "--no-such-option"], "unknown option"
        if choice == 1:
            return [*argv, "stray-argument"], "extra argument"
        if choice == 2:
            return [*argv, argv[-1] if argv[-1].startswith("-") else "--json"], "repeated option"
        options = [i for i, a in enumerate(argv) if a.startswith("--") and i + 1 < len(argv)]
        cut = rng.choice(options) + 1 if options else len(argv)
        return argv[:cut], "option without its value"


# -- running and judging -----------------------------------------------------------------------


def run_in_process(cases: list[Case], workers: int = 2) -> list[CliOutcome]:
    """The cases of commands that end by themselves, in `workers` fresh processes (each case
    swaps its process's streams, so one at a time per process)."""
    in_process = [c for c in cases if c.command not in SERVICES]
    chunks = [in_process[n::workers] for n in range(workers)]
    # Spawned, not forked: this process has Kafka clients whose threads a fork would not copy.
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as processes:
        return [o for chunk in processes.map(_run_in_process, chunks) for o in chunk]


def run_services(cases: list[Case]) -> list[CliOutcome]:
    """The `ticker` and `executor` cases as processes, four at a time (most wait). Run them on
    a quiet machine: one still starting after `SERVICE_RUN_S` would count as having accepted
    its arguments."""
    with ThreadPoolExecutor(4) as threads:
        return list(threads.map(_as_process, [c for c in cases if c.command in SERVICES]))


def _run_in_process(cases: list[Case]) -> list[CliOutcome]:
    """KAIROS_* variables are cleared: only the generated arguments count."""
    for name in [k for k in os.environ if k.startswith("KAIROS_")]:
        del os.environ[name]
    command = typer.main.get_command(app)  # once: building it takes longer than most cases
    return [_in_process(command, case) for case in cases]


def _in_process(command: Any, case: Case) -> CliOutcome:
    """Run the command as `kairos` would (standalone: usage errors exit 2), its output kept."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            command.main(args=case.argv, prog_name="kairos", standalone_mode=True)
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1
        except Exception as crash:  # what a user would see as a traceback
            name = f"{type(crash).__name__}: {str(crash)[:120]}"
            output = stdout.getvalue() + stderr.getvalue()
            return CliOutcome(case, 1, f"crash: {name}", False, output[-600:])
    return judge(case, code, stdout.getvalue(), stderr.getvalue())


def _as_process(case: Case) -> CliOutcome:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "kairos.cli", *case.argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=SERVICE_RUN_S)
    except subprocess.TimeoutExpired:
        # Killed, not stopped: a service without a broker may take its client timeout (30 s)
        # to notice SIGTERM, and what is judged is only what it said until now.
        process.kill()
        stdout, stderr = process.communicate(timeout=30)
        return CliOutcome(
            case,
            process.returncode,
            "ran until stopped (arguments accepted)",
            TRACEBACK not in stderr,
            stderr[-600:],
        )
    return judge(case, process.returncode, stdout, stderr)


def judge(case: Case, code: int, stdout: str, stderr: str) -> CliOutcome:
    """The outcome of a finished command line, and whether it is one the CLI promises."""
    output = stdout + stderr
    tail = output[-600:]
    if TRACEBACK in output:
        return CliOutcome(case, code, "traceback", False, tail)
    if code == 0:
        return CliOutcome(case, code, "exit 0", True, tail)
    if code == 2 and ("Usage:" in output or "Error" in output or "error:" in output):
        return CliOutcome(case, code, "usage error, exit 2", True, tail)
    if any(line.startswith("error:") for line in stderr.splitlines()):
        return CliOutcome(case, code, f"refused with a message, exit {code}", True, tail)
    if code in VERDICT_EXITS.get(case.command, ()) and stdout.strip():
        return CliOutcome(case, code, f"verdict, exit {code}", True, tail)
    return CliOutcome(case, code, f"exit {code} without a message", False, tail)


def tally(outcomes: list[CliOutcome], seconds: float) -> CliTally:
    result = CliTally(cases=len(outcomes), seconds=round(seconds, 1))
    for item in outcomes:
        result.by_outcome[item.outcome.split(":")[0]] += 1
        result.by_command.setdefault(item.case.command, Counter())[item.outcome.split(":")[0]] += 1
        if item.outcome.startswith("ran until stopped"):
            result.accepted_services.update(item.case.broken)
            if len(result.accepted_examples) < 12:
                result.accepted_examples.append(item.case.argv)
        if not item.passed:
            result.failures.append(
                {
                    "command": item.case.command,
                    "argv": item.case.argv,
                    "broken": list(item.case.broken),
                    "exit_code": item.exit_code,
                    "outcome": item.outcome,
                    "output_tail": item.output_tail,
                }
            )
    return result


def build_cases(bootstrap: str, prefix: str, workdir: Path, seed: int, count: int) -> list[Case]:
    builder = CaseBuilder(random.Random(seed), bootstrap, prefix, workdir / "cli-files")
    return list(builder.cases(count))
