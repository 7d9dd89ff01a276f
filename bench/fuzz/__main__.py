"""`python -m bench.fuzz [--seed N] [--events 10000] [--cli-cases 2000] [--json PATH]`.

Exits 0 when nothing unexpected happened (no crash, every record refused with its reason or,
if valid, fired and run, every command line refused clearly), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import deployment, local_broker
from bench.fuzz import accounting, report
from bench.fuzz.cli_fuzz import (
    SERVICES,
    CliTally,
    build_cases,
    run_in_process,
    run_services,
    tally,
)
from bench.fuzz.records import by_topic, must_run
from bench.fuzz.storm import StormResult, run_storm


def main() -> int:
    options = _options()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kairos-fuzz-") as temporary:
        workdir = Path(options.workdir or temporary)
        with _broker(options.bootstrap, workdir) as bootstrap:
            tag = uuid.uuid4().hex[:6]
            settings = deployment(bootstrap, f"fuzz-{tag}.")
            cli_prefix = deployment(bootstrap, f"fuzzcli-{tag}.").topic_prefix
            # The command lines run while the storm mostly waits for its fires: a deployment
            # of their own, so neither sees the other's records.
            cases = build_cases(bootstrap, cli_prefix, workdir, options.seed, options.cli_cases)
            with ThreadPoolExecutor(1) as background:
                cli_started = time.monotonic()
                in_process = background.submit(run_in_process, cases)
                storm = run_storm(settings, workdir / "storm", options.seed, options.events)
                outcomes = in_process.result()
            # After the storm, on a quiet machine (see run_services).
            outcomes += run_services(cases)
            cli = tally(outcomes, time.monotonic() - cli_started)
            judged = accounting.judge_all(storm.plan.records, storm.seen, settings)
    result = {
        "command": _command_line(options),
        "seed": options.seed,
        "finished_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": round(time.monotonic() - started, 1),
        "storm": _storm_figures(storm, judged, settings),
        "cli": _cli_figures(cli),
    }
    result["passed"] = _passed(result)
    Path(options.json).parent.mkdir(parents=True, exist_ok=True)
    Path(options.json).write_text(json.dumps(result, indent=2, default=str) + "\n")
    Path(options.markdown).write_text(report.markdown(result))
    print(f"fuzz: {'passed' if result['passed'] else 'FAILED'}; {options.json}, {options.markdown}")
    return 0 if result["passed"] else 1


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--cli-cases", type=int, default=2_000)
    parser.add_argument("--json", default="bench/results/fuzz.json")
    parser.add_argument("--markdown", default="FUZZ_SECTION.md")
    parser.add_argument(
        "--bootstrap", help="Use this broker instead of starting one (it gets fresh topics)."
    )
    parser.add_argument("--workdir", help="Keep logs and files here instead of a temporary dir.")
    return parser.parse_args()


@contextmanager
def _broker(bootstrap: str | None, workdir: Path) -> Iterator[str]:
    if bootstrap is not None:
        yield bootstrap
        return
    with local_broker(workdir) as status:
        assert status.bootstrap_servers is not None
        yield status.bootstrap_servers


def _command_line(options: argparse.Namespace) -> str:
    return (
        f"python -m bench.fuzz --seed {options.seed} --events {options.events} "
        f"--cli-cases {options.cli_cases}"
    )


def _storm_figures(
    storm: StormResult, judged: list[accounting.Judged], settings: Any
) -> dict[str, Any]:
    rows = accounting.rows(judged)
    letters = Counter(
        letter["dead_lettered_by"].split(":")[0] for letter in storm.seen.dead_letters.values()
    )
    owed = [r.owed_run for r in storm.plan.records if r.owed_run is not None and must_run(r)]
    crashes = sum(not up for up in storm.alive_after.values()) + sum(
        figures["tracebacks"] for figures in storm.logs.values()
    )
    return {
        "records": len(storm.plan.records),
        "per_topic": {role.value: len(records) for role, records in by_topic(storm.plan.records)},
        "publish_s": round(storm.publish_s, 1),
        "settle_s": round(storm.settle_s, 1),
        "alive": storm.alive_after,
        "exit_codes": storm.exit_codes,
        "logs": storm.logs,
        "crashes": crashes,
        "canary": storm.canary,
        "commands": storm.commands,
        "owed": {"owed": len(owed), "ran": sum(1 for run in owed if run in storm.seen.ran)},
        "dead_letters": {"total": sum(letters.values()), **letters},
        "dead_letter_reasons": accounting.dead_letter_reasons(storm.seen, settings),
        "rows": [row.as_dict() for row in rows],
        "unexpected": sum(row.unexpected for row in rows),
    }


def _cli_figures(cli: CliTally) -> dict[str, Any]:
    # Not dataclasses.asdict: it rebuilds a Counter from its items, counting the pairs.
    return {
        "cases": cli.cases,
        "seconds": cli.seconds,
        "by_outcome": dict(cli.by_outcome.most_common()),
        "by_command": {c: dict(n.most_common()) for c, n in sorted(cli.by_command.items())},
        "services": sum(sum(cli.by_command.get(s, {}).values()) for s in SERVICES),
        "accepted_services": dict(cli.accepted_services.most_common()),
        "accepted_examples": cli.accepted_examples,
        "failures": cli.failures,
    }


def _passed(result: dict[str, Any]) -> bool:
    storm = result["storm"]
    commands_ok = not any(c["traceback"] for c in storm["commands"].values())
    return (
        storm["crashes"] == 0
        and storm["unexpected"] == 0
        and storm["canary"]["ran"]
        and storm["owed"]["ran"] == storm["owed"]["owed"]
        and commands_ok
        and not result["cli"]["failures"]
    )


if __name__ == "__main__":
    sys.exit(main())
