"""The least-privilege Kafka ACLs of each Kairos role, derived from one deployment's names.

One place says what each process does on the cluster, so `kairos acls`, docs/operations.md and
the role tests agree. Kafka's implications keep the lists short: READ or WRITE on a topic or a
group implies DESCRIBE on it, and WRITE on a transactional id implies DESCRIBE on it. Since
Kafka 3.0 an idempotent producer needs no IDEMPOTENT_WRITE on the cluster (KIP-679), only WRITE
on the topics it produces to.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kairos.streams.kafka.settings import (
    CALENDAR_READERS_GROUP,
    CONSOLE_READERS_GROUP,
    EXECUTOR_GROUP,
    HISTORY_READERS_GROUP,
    NOTIFIERS_GROUP,
    RESTORE_GROUP,
    SCHEDULE_READERS_GROUP,
    TEAM_READERS_GROUP,
    TICKER_GROUP,
    TICKER_TRANSACTIONAL_ID,
    KafkaSettings,
)
from kairos.streams.kafka.topics import TopicLayout, TopicRole


class Role(StrEnum):
    TICKER = "ticker"
    EXECUTOR = "executor"
    PRODUCER = "producer"
    CALENDAR_PUBLISHER = "calendar-publisher"
    AUDITOR = "auditor"
    OPERATOR = "operator"
    CONSOLE = "console"
    NOTIFIER = "notifier"


class Resource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional-id"


class Pattern(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(StrEnum):
    READ = "READ"
    WRITE = "WRITE"
    DESCRIBE = "DESCRIBE"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    CREATE = "CREATE"


@dataclass(frozen=True)
class Grant:
    """One ACL a role needs: allow `operation` on the resource, and why the role needs it."""

    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation
    why: str

    def describe(self) -> str:
        prefixed = " (prefixed)" if self.pattern is Pattern.PREFIXED else ""
        return f"{self.operation} on {self.resource} {self.name}{prefixed}"


@dataclass(frozen=True)
class DeploymentNames:
    """Every name a deployment claims on the cluster, as its settings build them."""

    layout: TopicLayout
    ticker_group: str
    executor_group: str
    restore_group_prefix: str
    transactional_id_prefix: str
    schedule_readers_group: str
    history_readers_group: str
    calendar_readers_group: str
    console_readers_group: str
    team_readers_group: str
    notifiers_group: str

    @classmethod
    def of(
        cls,
        kafka: KafkaSettings,
        ticker_group: str | None = None,
        executor_group: str | None = None,
    ) -> DeploymentNames:
        """The names the deployment's services use; a group given is one set by `--group-id`."""
        return cls(
            layout=kafka.layout,
            ticker_group=ticker_group or kafka.deployment_id(TICKER_GROUP),
            executor_group=executor_group or kafka.deployment_id(EXECUTOR_GROUP),
            restore_group_prefix=kafka.deployment_id(RESTORE_GROUP),
            transactional_id_prefix=kafka.deployment_id(TICKER_TRANSACTIONAL_ID),
            schedule_readers_group=kafka.deployment_id(SCHEDULE_READERS_GROUP),
            history_readers_group=kafka.deployment_id(HISTORY_READERS_GROUP),
            calendar_readers_group=kafka.deployment_id(CALENDAR_READERS_GROUP),
            console_readers_group=kafka.deployment_id(CONSOLE_READERS_GROUP),
            team_readers_group=kafka.deployment_id(TEAM_READERS_GROUP),
            notifiers_group=kafka.deployment_id(NOTIFIERS_GROUP),
        )


def role_grants(role: Role, names: DeploymentNames) -> list[Grant]:
    """The ACLs `role` needs in this deployment, and nothing more."""
    return _GRANTS[role](names)


def _topic(names: DeploymentNames, role: TopicRole, operation: Operation, why: str) -> Grant:
    return Grant(Resource.TOPIC, names.layout.name(role), Pattern.LITERAL, operation, why)


def _group(group: str, operation: Operation, why: str) -> Grant:
    return Grant(Resource.GROUP, group, Pattern.LITERAL, operation, why)


def _ticker(names: DeploymentNames) -> list[Grant]:
    return [
        _topic(
            names,
            TopicRole.SCHEDULES,
            Operation.READ,
            "consume schedule changes; read the definitions of the schedules its schedules "
            "wait for (upstream), on any partition",
        ),
        _topic(
            names,
            TopicRole.SCHEDULES,
            Operation.WRITE,
            "pause or delete a schedule after its last run (max_runs), pause it after "
            "pause_on_failure failed runs in a row",
        ),
        _topic(names, TopicRole.CHANGELOG, Operation.READ, "restore owned partitions' state"),
        _topic(names, TopicRole.CHANGELOG, Operation.WRITE, "record state in each transaction"),
        _topic(names, TopicRole.RUNS, Operation.WRITE, "fire RunRequested records"),
        _topic(names, TopicRole.DEAD_LETTERS, Operation.WRITE, "dead-letter refused schedules"),
        _topic(
            names,
            TopicRole.DEAD_LETTERS,
            Operation.READ,
            "read upstream schedules as their tickers hold them, refused changes skipped",
        ),
        _reader_group(names.schedule_readers_group),
        _topic(names, TopicRole.RUN_EVENTS, Operation.WRITE, "publish skipped misfires"),
        _topic(
            names,
            TopicRole.RUN_EVENTS,
            Operation.READ,
            "follow the runs that ended, to pause a schedule after pause_on_failure failures",
        ),
        _reader_group(names.history_readers_group),
        *_ticker_reads(names),
        _group(
            names.ticker_group,
            Operation.READ,
            "join the tickers' group; commit offsets inside transactions",
        ),
        Grant(
            Resource.GROUP,
            names.restore_group_prefix,
            Pattern.PREFIXED,
            Operation.DESCRIBE,
            "the restore consumer's group id (one per ticker instance): never joined, but "
            "librdkafka looks its coordinator up",
        ),
        Grant(
            Resource.TRANSACTIONAL_ID,
            names.transactional_id_prefix,
            Pattern.PREFIXED,
            Operation.WRITE,
            "the fenced transactions (one transactional id per ticker instance)",
        ),
    ]


def _ticker_reads(names: DeploymentNames) -> list[Grant]:
    return [
        _topic(names, TopicRole.CALENDARS, Operation.READ, "read the shared business calendars"),
        _reader_group(names.calendar_readers_group),
        _topic(
            names,
            TopicRole.TEAMS,
            Operation.READ,
            "check schedule and calendar changes' signatures (--ownership signed)",
        ),
        _reader_group(names.team_readers_group),
    ]


def _executor(names: DeploymentNames) -> list[Grant]:
    return [
        _topic(names, TopicRole.RUNS, Operation.READ, "consume RunRequested records"),
        _topic(
            names,
            TopicRole.RUNS,
            Operation.DESCRIBE_CONFIGS,
            "check --dedupe-retention against the runs topic's retention",
        ),
        _topic(names, TopicRole.RUN_EVENTS, Operation.WRITE, "publish run events"),
        _topic(names, TopicRole.DEAD_LETTERS, Operation.WRITE, "dead-letter refused runs"),
        _group(
            names.executor_group,
            Operation.READ,
            "join the executors' group, commit offsets, check its members' dedupe stores",
        ),
    ]


def _producer(names: DeploymentNames) -> list[Grant]:
    return [
        _topic(names, TopicRole.SCHEDULES, Operation.WRITE, "publish schedule changes"),
        _topic(
            names,
            TopicRole.SCHEDULES,
            Operation.READ,
            "`kairos apply` and `kairos schedules` read the current schedules",
        ),
        _reader_group(names.schedule_readers_group),
        _topic(
            names,
            TopicRole.CALENDARS,
            Operation.READ,
            "`kairos apply` and `preview` read the calendars schedules name",
        ),
        _reader_group(names.calendar_readers_group),
        _topic(
            names,
            TopicRole.DEAD_LETTERS,
            Operation.READ,
            "`kairos teams rejections` reads the changes refused to a team",
        ),
        _reader_group(names.history_readers_group),
        _topic(
            names,
            TopicRole.TEAMS,
            Operation.READ,
            "`kairos teams quota` and `preview --owner --histogram` read a team's quota; "
            "calendar changes' signatures are checked as a signed deployment's tickers do",
        ),
        _reader_group(names.team_readers_group),
        _tickers_judged(names),
    ]


def _calendar_publisher(names: DeploymentNames) -> list[Grant]:
    """A team that maintains shared calendars: granted per team, beside the producer role, so
    that teams which only schedule cannot write the calendars topic at all."""
    return [
        _topic(
            names,
            TopicRole.CALENDARS,
            Operation.WRITE,
            "`kairos calendars apply|delete` publish calendar changes",
        ),
        _topic(
            names,
            TopicRole.CALENDARS,
            Operation.READ,
            "`kairos calendars` reads the current calendars",
        ),
        _reader_group(names.calendar_readers_group),
        _topic(
            names,
            TopicRole.TEAMS,
            Operation.READ,
            "calendar changes' signatures are checked as a signed deployment's tickers do",
        ),
        _reader_group(names.team_readers_group),
        _topic(
            names,
            TopicRole.SCHEDULES,
            Operation.DESCRIBE,
            "the tickers commit an offset per schedules partition: where their mode is read",
        ),
        _tickers_judged(names),
    ]


def _auditor(names: DeploymentNames) -> list[Grant]:
    read = [
        (TopicRole.SCHEDULES, "replay schedule history"),
        (TopicRole.RUNS, "read what was fired"),
        (TopicRole.RUN_EVENTS, "read what was executed"),
        (TopicRole.CALENDARS, "replay the calendar versions in force at each decision"),
    ]
    return [
        *(_topic(names, role, Operation.READ, why) for role, why in read),
        *(
            _topic(names, role, Operation.DESCRIBE_CONFIGS, "learn how far back history is kept")
            for role, _ in read
        ),
        _topic(
            names,
            TopicRole.DEAD_LETTERS,
            Operation.READ,
            "skip the changes tickers refused; judge outcomes against executors' refusals",
        ),
        _reader_group(names.history_readers_group),
        _reader_group(names.calendar_readers_group),
        _topic(
            names,
            TopicRole.TEAMS,
            Operation.READ,
            "replay only the calendar changes a signed deployment's tickers count: their "
            "signatures are checked against the registered teams",
        ),
        _reader_group(names.team_readers_group),
        _tickers_judged(names),
    ]


def _tickers_judged(names: DeploymentNames) -> Grant:
    return _group(
        names.ticker_group,
        Operation.DESCRIBE,
        "the tickers' committed offsets: which changes a signed ticker took, to show their "
        "signing teams, and the mode calendar changes are judged in (and, in the console, who "
        "owns which partition)",
    )


def _reader_group(group: str) -> Grant:
    return _group(
        group,
        Operation.DESCRIBE,
        "the readers' group id: never joined, but librdkafka looks its coordinator up",
    )


def _operator(names: DeploymentNames) -> list[Grant]:
    prefix = names.layout.prefix
    return [
        Grant(Resource.TOPIC, prefix, Pattern.PREFIXED, operation, why)
        for operation, why in [
            (Operation.CREATE, "`kairos topics create`"),
            (Operation.DESCRIBE, "`kairos topics check`, `kairos partitions`"),
            (Operation.DESCRIBE_CONFIGS, "`kairos topics check`"),
        ]
    ] + [
        Grant(
            Resource.GROUP,
            prefix,
            Pattern.PREFIXED,
            Operation.DESCRIBE,
            "`kairos partitions`: the groups' members and committed offsets",
        ),
        # Only administrators register teams: whoever writes this topic decides who owns what.
        _topic(names, TopicRole.TEAMS, Operation.WRITE, "`kairos teams put|remove`"),
        _topic(names, TopicRole.TEAMS, Operation.READ, "`kairos teams list`"),
        _reader_group(names.team_readers_group),
    ]


def _console(names: DeploymentNames) -> list[Grant]:
    """The auditor's reads (the console runs `audit verify`; they include the dead letters it
    shows, and the tickers' group it shows who owns what from), and its own readers' group.
    Actions need the producer's too."""
    return [
        *_auditor(names),
        _reader_group(names.console_readers_group),
        _topic(
            names,
            TopicRole.CHANGELOG,
            Operation.DESCRIBE,
            "the partitions page: each changelog partition's end offset",
        ),
    ]


def _notifier(names: DeploymentNames) -> list[Grant]:
    return [
        _topic(names, TopicRole.RUN_EVENTS, Operation.READ, "read run events to tell their teams"),
        _topic(names, TopicRole.DEAD_LETTERS, Operation.READ, "read refused changes to tell"),
        _topic(
            names,
            TopicRole.DEAD_LETTERS,
            Operation.WRITE,
            "dead-letter a notice no route took, reported to its team",
        ),
        _group(names.notifiers_group, Operation.READ, "join the notifiers' group, commit offsets"),
    ]


_GRANTS = {
    Role.TICKER: _ticker,
    Role.EXECUTOR: _executor,
    Role.PRODUCER: _producer,
    Role.CALENDAR_PUBLISHER: _calendar_publisher,
    Role.AUDITOR: _auditor,
    Role.OPERATOR: _operator,
    Role.CONSOLE: _console,
    Role.NOTIFIER: _notifier,
}
