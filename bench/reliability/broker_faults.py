"""The broker scenarios: each picks its victim from the cluster's metadata, as the fault would.

Each `inject` runs at the fault's instant, blocks until its part is done (a paused broker is
resumed, a rolling restart has restarted every node) and returns what it did, one line per step.
What it leaves broken (a broker lost for good) the harness mends after the scenario's window.
"""

from __future__ import annotations

import random
import signal
import time

from bench.reliability.scenario import Scenario
from bench.reliability.system import BROKERS, PARTITIONS, System
from kairos.streams.kafka.settings import TICKER_GROUP, TICKER_TRANSACTIONAL_ID
from kairos.streams.kafka.topics import TopicRole

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
STOP_SECONDS = 15


def _java_string_hash(text: str) -> int:
    """Java's `String.hashCode`, which the broker uses to place a transactional id."""
    units = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[index : index + 2], "big")) & 0xFFFFFFFF
    return value


def transaction_coordinator(system: System, instance: str) -> int:
    """The broker coordinating the ticker `instance`'s transactions: the leader of the
    `__transaction_state` partition its transactional id hashes to (Kafka's
    `TransactionStateManager.partitionFor`: `abs(hashCode) % partitions`)."""
    transactional_id = system.settings.deployment_id(TICKER_TRANSACTIONAL_ID + instance)
    return _leader_for(system, TRANSACTION_STATE_TOPIC, transactional_id)


def group_coordinator(system: System) -> int:
    """The broker coordinating the tickers' group: the leader of the `__consumer_offsets`
    partition its id hashes to (Kafka's `GroupCoordinator.partitionFor`, the same rule as
    for transactional ids). DescribeGroups would say it too, but went unanswered for a
    minute on this machine under the suite's load."""
    return _leader_for(system, OFFSETS_TOPIC, system.settings.deployment_id(TICKER_GROUP))


def _leader_for(system: System, topic: str, key: str) -> int:
    partitions = system.admin().list_topics(topic, timeout=10).topics[topic].partitions
    return int(partitions[(_java_string_hash(key) & 0x7FFFFFFF) % len(partitions)].leader)


def _kill_runs_leader(system: System, rng: random.Random) -> list[str]:
    partition = rng.randrange(PARTITIONS)
    topic = system.settings.layout.name(TopicRole.RUNS)
    leader = system.leader_of(topic, partition)
    system.signal_broker(leader, signal.SIGKILL)
    return [f"SIGKILL broker {leader}, leader of {topic} partition {partition}"]


def _kill_transaction_coordinator(system: System, rng: random.Random) -> list[str]:
    instance = rng.choice(system.tickers).name
    coordinator = transaction_coordinator(system, instance)
    system.signal_broker(coordinator, signal.SIGKILL)
    return [f"SIGKILL broker {coordinator}, transaction coordinator of ticker {instance}"]


def _kill_group_coordinator(system: System, rng: random.Random) -> list[str]:
    coordinator = group_coordinator(system)
    system.signal_broker(coordinator, signal.SIGKILL)
    return [f"SIGKILL broker {coordinator}, coordinator of the tickers' group"]


def _pause_broker(system: System, rng: random.Random) -> list[str]:
    victim = rng.randint(1, BROKERS)
    system.signal_broker(victim, signal.SIGSTOP)
    time.sleep(STOP_SECONDS)
    system.signal_broker(victim, signal.SIGCONT)
    return [f"SIGSTOP broker {victim} for {STOP_SECONDS} s, then SIGCONT"]


def _rolling_restart(system: System, rng: random.Random) -> list[str]:
    done = []
    for node_id in rng.sample(range(1, BROKERS + 1), BROKERS):
        began = time.monotonic()
        system.stop_broker(node_id)
        system.start_brokers()
        done.append(
            f"broker {node_id} SIGTERM, restarted, in sync after {time.monotonic() - began:.0f} s"
        )
    return done


def _lose_broker(system: System, rng: random.Random) -> list[str]:
    victim = rng.randint(1, BROKERS)
    system.signal_broker(victim, signal.SIGKILL)
    return [f"SIGKILL broker {victim}, left down for the rest of the window"]


BROKER_SCENARIOS = (
    Scenario(
        "runs-leader-killed",
        "SIGKILL of the broker leading a runs partition, with ticker transactions open on it",
        "A committed transaction survives the loss of its leader when min.insync.replicas "
        "held at commit; an open one is aborted or completed by its coordinator.",
        _kill_runs_leader,
    ),
    Scenario(
        "transaction-coordinator-killed",
        "SIGKILL of the broker coordinating a ticker's transactional id",
        "The __transaction_state partition fails over to an in-sync replica; the new "
        "coordinator completes or aborts the transactions the old one left.",
        _kill_transaction_coordinator,
    ),
    Scenario(
        "group-coordinator-killed",
        "SIGKILL of the broker coordinating the tickers' consumer group",
        "The __consumer_offsets partition fails over; committed offsets survive; members "
        "rediscover the coordinator and keep their generation if they rejoin in time.",
        _kill_group_coordinator,
    ),
    Scenario(
        "broker-paused",
        f"SIGSTOP of a broker for {STOP_SECONDS} s, then SIGCONT",
        "The controller fences a broker whose heartbeats stop (broker.session.timeout.ms, 9 s) "
        "and moves its leaderships; it catches up and rejoins the ISR when it resumes.",
        _pause_broker,
    ),
    Scenario(
        "rolling-restart",
        "A clean restart (SIGTERM, start, wait for full ISR) of each of the three brokers in turn",
        "A controlled shutdown moves leaderships away first; nothing acknowledged is lost.",
        _rolling_restart,
        window_s=240,
    ),
    Scenario(
        "broker-lost",
        "SIGKILL of one broker, left down: the cluster goes on with two",
        "With replication factor 3 and min.insync.replicas 2, writes go on with one replica "
        "gone; a second loss would stop them (NOT_ENOUGH_REPLICAS), never lose them.",
        _lose_broker,
    ),
)
