"""The fuzz run's figures as JSON and as the markdown section docs/reliability.md takes."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.fuzz.cli_fuzz import SERVICE_RUN_S

FIXED = (
    "**The executor crashed on a run whose job `params_json` is JSON but not an object** "
    '(`[1, 2]`, `null`, `"text"`, `3`): the admission check, which must never raise for bad '
    "input, raised `TypeError`, the executor process exited, and after a restart it would meet "
    "the same uncommitted record again: one such record stops every run of the deployment. "
    "Found by the runs topic's `invalid_content` (variant `params_not_object`); before the fix a "
    "2,000-record run of the same seed ended with the executor dead, 0 of 195 owed runs run and "
    "the canary not run. Fixed in `streams/wire/records.py` (`job_from_record` raises a clear "
    "`JobParamsRecordError`) and `services/executor/admission.py` (it is a dead letter, "
    "`RunRequestInvalidError`); test `tests/unit/test_job_params_record.py`.",
    "**An unclear dead-letter reason** for the same definitions on the schedules topic: `invalid "
    "definition: 'list' object is not a mapping` named neither the field nor the fix; it is now "
    "`invalid definition: job.params_json is an array; it must be a JSON object of the job's "
    'fields, such as {"command": "echo hi"}` (same fix, same test).',
    "**`kairos apply -f` and `kairos preview -f` crashed on a deeply nested file** (5,000 `[`): a "
    "`RecursionError` traceback, after 5 s; the file is now refused as unreadable, exit 1, one "
    "line (`core/schedule.py`; tests `deep-yaml`, `deep-json` in "
    "`tests/unit/test_schedule_model.py`).",
    "**`kairos ticker` / `kairos executor --log-level LOUD` crashed** with `logging`'s "
    "`ValueError` traceback before any other check; an unknown level is now a usage error, exit "
    "2, naming the levels (`cli/options.py`; test `tests/unit/test_cli_log_level.py`).",
    "**A state directory that cannot be created** (`--state-dir /dev/null/state`): the executor "
    "ended in a `NotADirectoryError` traceback from its SQLite store; the ticker logged one at "
    "every partition assignment and retried forever. Both now exit 1 at start with one line "
    "naming the directory (`streams/dedupe/sqlite.py`, `services/ticker/settings.py`; test "
    "`tests/local/test_state_dir_errors.py`).",
)


def markdown(result: dict[str, Any]) -> str:
    storm, cli = result["storm"], result["cli"]
    lines = [
        "## Fuzzing: hostile records on every consumed topic, generated command lines",
        "",
        f"`{result['command']}` (seed {result['seed']}, {result['finished_at']}, "
        f"{result['seconds']:.0f} s on this 2-core machine; JSON: `bench/results/fuzz.json`).",
        "",
        "A local broker, one real `kairos ticker` and one real `kairos executor` (SQLite dedupe "
        f"store). {storm['records']:,} seeded records were published in "
        f"{storm['publish_s']:.1f} s over the four topics Kairos consumes, then the run waited "
        "for every valid schedule's fire, published a canary schedule, read every dead letter "
        "back and let the history reader (`audit`, `replay`, `runs`) read every topic. The "
        "ticker changelog is left out: only tickers write it, in their transactions.",
        "",
        *_deployment_lines(storm),
        "",
        "Each record's fate, by topic and class. *Service*: the ticker (schedules) or the "
        "executor (runs); the run-events and dead-letters topics have no consuming service. "
        "*Readers*: the history reader every reading command uses. *Unexpected*: a record that "
        "was not refused with its reason (or, if valid, did not fire and run).",
        "",
        "| topic | class | records | service | readers | unexpected |",
        "|---|---|---:|---|---|---:|",
        *(_row_line(row) for row in storm["rows"]),
        "",
        *_totals_lines(storm),
        "",
        *_cli_lines(cli),
        "",
        "### Found and fixed",
        "",
        *(f"- {item}" for item in FIXED),
        "",
        *_left_lines(storm, cli),
    ]
    return "\n".join(lines) + "\n"


def _deployment_lines(storm: dict[str, Any]) -> list[str]:
    canary = storm["canary"]
    alive = ", ".join(f"{name} {'alive' if up else 'DEAD'}" for name, up in storm["alive"].items())
    logs = storm["logs"]
    commands = ", ".join(
        f"`{name}` exit {c['exit_code']} in {c['seconds']} s"
        f"{' TRACEBACK' if c['traceback'] else ''}"
        for name, c in storm["commands"].items()
    )
    owed = storm["owed"]
    canary_text = f"ran {canary['seconds']} s later" if canary["ran"] else "DID NOT RUN"
    settled = (
        f"the last {storm['settle_s']:.0f} s after the last valid fire was due"
        if owed["ran"] == owed["owed"]
        else f"{owed['owed'] - owed['ran']:,} still missing {storm['settle_s']:.0f} s after it"
    )
    return [
        f"- **Crashes: {storm['crashes']}.** After the storm: {alive}; exit codes on SIGTERM "
        f"{storm['exit_codes']}; Python tracebacks in their logs: ticker "
        f"{logs['ticker']['tracebacks']}, executor {logs['executor']['tracebacks']}.",
        f"- **Nothing valid lost:** {owed['ran']:,} of {owed['owed']:,} owed runs (valid "
        f"schedules and valid forged runs) succeeded, {settled}; the canary schedule published "
        f"after the storm {canary_text}.",
        f"- **Readers still read:** {commands}. Their exit codes are verdicts on a window "
        "full of forged records (`audit verify`: 1 on a breach); what is checked is that each "
        "finished, without a traceback.",
        f"- **Dead letters:** {storm['dead_letters']['total']:,} written for storm records "
        f"(ticker {storm['dead_letters']['ticker']:,}, executor "
        f"{storm['dead_letters']['executor']:,}), each with its reason; their reasons are counted "
        "in the JSON (`storm.dead_letter_reasons`).",
    ]


def _row_line(row: dict[str, Any]) -> str:
    return (
        f"| {row['topic']} | {row['class']} | {row['records']} | {_counts(row['service'])} | "
        f"{_counts(row['readers'])} | {row['unexpected']} |"
    )


def _counts(counts: dict[str, int], shown: int = 4) -> str:
    items = list(counts.items())
    text = ", ".join(f"{name} {n}" for name, n in items[:shown])
    if len(items) > shown:
        text += f", {len(items) - shown} other reasons {sum(n for _, n in items[shown:])}"
    return text.replace("|", "\\|")


def _totals_lines(storm: dict[str, Any]) -> list[str]:
    by_class: Counter[str] = Counter()
    unexpected = 0
    for row in storm["rows"]:
        by_class[row["class"]] += row["records"]
        unexpected += row["unexpected"]
    per_topic = ", ".join(f"{t} {n:,}" for t, n in storm["per_topic"].items())
    return [
        f"Per topic: {per_topic}. Per class: "
        + ", ".join(f"{c} {n:,}" for c, n in sorted(by_class.items()))
        + f". **Unexpected outcomes: {unexpected}.**"
    ]


def _cli_lines(cli: dict[str, Any]) -> list[str]:
    outcomes = ", ".join(f"{name} {n:,}" for name, n in cli["by_outcome"].items())
    return [
        f"### Command lines: {cli['cases']:,} generated cases in {cli['seconds']:.0f} s",
        "",
        "They ran while the storm did, on the same broker but a deployment (topic prefix) of "
        "their own, two processes in parallel; the `ticker` and `executor` cases after it. "
        "Every `kairos` command but `dev` (it starts and stops brokers here), with random flags "
        "and values: bad durations and instants, counts and ports out of range, unicode and "
        "5,000-character text, bad schedules files (garbage bytes, invalid YAML, wrong types, "
        "huge values, an alias bomb, deep nesting, UTF-16), bad properties files, a missing "
        "broker, garbage bootstrap addresses, unknown options and stray arguments. Passing: no "
        "traceback; exit 0, or exit 2 with a usage message, or a non-zero exit with an "
        "`error:` line saying what was wrong, or a command's documented verdict exit with its "
        "report. `ticker` and `executor` cases run as processes for up to "
        f"{SERVICE_RUN_S:.0f} s ({cli['services']} cases), after the storm: on a loaded "
        "machine one still starting would pass for one that accepted its arguments.",
        "",
        f"Outcomes: {outcomes}. **Failures: {len(cli['failures'])}.**",
        "",
        "Service cases still running when stopped count as having accepted their arguments; "
        f"what had been broken in them: {_counts(cli['accepted_services'], 8) or 'nothing'} "
        "(their command lines: `cli.accepted_examples` in the JSON). Some are refusals that "
        "had not started yet: on this shared machine (load average 11 from other work) a "
        "refusal took up to 4 s of start-up alone, more with four starting at once. The same "
        "53 cases of seed 15 run again on their own (16:16 UTC) had 4 accepted: 3 with a "
        "missing broker (services retry by design) and 1 with port 99999 (below).",
        "",
        "| command | outcomes |",
        "|---|---|",
        *(f"| {command} | {_counts(counts, 6)} |" for command, counts in cli["by_command"].items()),
    ]


def _left_lines(storm: dict[str, Any], cli: dict[str, Any]) -> list[str]:
    return [
        "### What this run does not cover",
        "",
        "- The ticker changelog: a foreign writer there is damage to the ticker's state, not "
        "input; restore trusts it.",
        "- Records without a key on the schedules topic never reach Kairos: the broker refuses "
        "them (a compacted topic needs keys), so they are counted as refused by the broker.",
        "- The run-events and dead-letters topics have no service consumer: a decodable record "
        "there with odd content (a run event of kind `unknown`, a dead letter with a negative "
        "partition) is read, and only the reading commands' survival is checked for it.",
        "- Seen, not fixed: a `ticker` or `executor` given an address that can never work "
        "(`--bootstrap-servers 127.0.0.1:99999`, `::`) runs and retries, as it does for a broker "
        "that is down, instead of refusing it at start; and without a broker a ticker took 15 s "
        "to act on SIGTERM (a blocking client call of up to 30 s).",
        "- One seed per run; another seed draws other variants of the same classes.",
    ]
