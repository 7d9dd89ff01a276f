"""The reliability suite's broker kill, short, on the secured cluster: the leader of a runs
partition is SIGKILLed while the tickers' transactions are open on it, and the promise holds.

The same harness as `python -m bench.reliability` (its `runs-leader-killed` scenario), with a
smaller load and a two-minute window: two tickers, two executors on PostgreSQL, every job
recording its effect in the dedupe store's transaction. After the window, the broker is started
again and `kairos audit verify --outcomes` must hold: nothing lost, nothing committed twice,
every run finished, and no effect recorded twice.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.reliability import scenario
from bench.reliability.broker_faults import BROKER_SCENARIOS
from bench.reliability.system import System
from tests.cluster.conftest import SecureCluster
from tests.helpers import unique_name

pytestmark = pytest.mark.cluster

SIZE = 1_000
WINDOW_S = 120


@pytest.mark.timeout(900)
def test_the_promise_holds_when_the_leader_of_a_runs_partition_is_killed(
    secure_cluster: SecureCluster, tmp_path: Path
) -> None:
    kill = next(s for s in BROKER_SCENARIOS if s.name == "runs-leader-killed")
    system = System(
        tmp_path,
        seed=7,
        size=SIZE,
        cluster=secure_cluster.cluster,
        kafka_config=secure_cluster.properties_file(),
    )
    try:
        system.start()
        system.deploy(datetime.now(UTC), topic_prefix=unique_name("rel") + ".")
        system.wait_until_firing()
        result = scenario.run(
            system, dataclasses.replace(kill, window_s=WINDOW_S), random.Random(7)
        )
    finally:
        system.stop()
    assert result.steps and result.steps[0].startswith("SIGKILL broker"), result.steps
    assert any(r.startswith("broker") for r in result.restarted), result.restarted
    assert result.expected > SIZE // 2, "the window must owe hundreds of runs"
    assert (result.verdict, result.lost, result.committed_twice) == ("holds", 0, 0), result
    assert (result.executed_twice, result.unfinished) == (0, 0), result
    assert result.fired == result.expected
