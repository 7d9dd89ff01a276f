"""A herd larger than a transaction: every team's first fires go in the first transaction.

The ticker's turn logic on the in-memory cluster with real RocksDB stores and the fake clock
(tests/fakes): one team's bulk and ten small teams' schedules fall due at the same instant, more
than one transaction carries.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

from tests.fakes.ticker_world import START, World

TRANSACTION = 500
HERD_AT = START + timedelta(seconds=20)


def _every_minute(schedule_id: str, owner: str) -> dict[str, object]:
    return {"id": schedule_id, "every": "60s", "start_at": HERD_AT.isoformat(), "owner": owner}


def test_small_teams_fire_in_the_first_transaction_of_a_bigger_teams_herd(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    bulk = [_every_minute(f"bulk-{n:05d}", "bulk") for n in range(2_400)]
    small = [_every_minute(f"team{t}-{n}", f"team{t}") for t in range(10) for n in range(5)]
    world.publish(*bulk[:1_200], *small, *bulk[1_200:])
    ticker, _ = world.ticker(max_decisions_per_transaction=TRANSACTION)
    ticker.connect()
    owners = {s["id"]: s["owner"] for s in (*bulk, *small)}
    while not world.runs():
        ticker.turn()
    first = Counter(owners[run["schedule_id"]] for run in world.runs())
    assert sum(first.values()) == TRANSACTION
    assert {team: first[team] for team in owners.values() if team != "bulk"} == {
        f"team{t}": 5 for t in range(10)
    }
    while len(world.runs()) < len(owners):
        ticker.turn()
    ticker.disconnect()
    assert set(world.run_ids().values()) == {1}, "an occurrence fired twice"
