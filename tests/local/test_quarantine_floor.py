"""A quarantined schedule's id keeps its floor and its owner, read from a real store (H2)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kairos.core.calendar_rules import latest
from kairos.core.firing import ScheduleState
from kairos.core.schedule import Schedule
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.quarantine import PoisonedScheduleError, Quarantine
from kairos.services.ticker.work import TransactionWork
from kairos.streams.state.changelog import Floor, StateWriteEncoder
from kairos.streams.state.state_store import PartitionStore, StateWrite, StoreMemory
from kairos.streams.wire.codec import make_codecs

CODECS = make_codecs()
T0 = datetime(2027, 1, 1, tzinfo=UTC)
DECIDED = T0 + timedelta(days=3)


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[OwnedPartition]:
    schedule = Schedule(id="payments-settle", cron="0 3 * * *", start_at=T0, owner="payments")
    state = ScheduleState(
        schedule, version=7, next_nominal=DECIDED + timedelta(days=1), last_decided_nominal=DECIDED
    )
    store = PartitionStore(tmp_path, StoreMemory(16))
    store.apply([StateWriteEncoder(CODECS).state_write(state.schedule_id, state, True)], 1)
    partition = OwnedPartition(0, store, CODECS, T0, latest({}))
    yield partition
    store.close()


def _quarantined(owned: OwnedPartition) -> Floor:
    work = TransactionWork()
    poisoned = PoisonedScheduleError(0, "payments-settle", "decide", ValueError("bad arithmetic"))
    Quarantine(CODECS, "schedules", "ticker:t1").take(work, poisoned, owned, 7, T0)
    assert work.states[0] == {"payments-settle": None}
    return work.floors[0]["payments-settle"]


def test_a_quarantined_schedule_leaves_its_last_decision_and_its_owner(
    owned: OwnedPartition,
) -> None:
    assert _quarantined(owned) == Floor(7, DECIDED, "payments")


def test_the_owner_is_kept_when_the_model_no_longer_accepts_the_stored_definition(
    owned: OwnedPartition,
) -> None:
    """As after an upgrade that tightened a bound: the record decodes, the schedule does not."""
    stored = owned.store.get("payments-settle")
    assert stored is not None
    record = CODECS.ticker_state.decode(stored[0])
    record["definition"]["cron"] = "not a cron"
    corrupted = CODECS.ticker_state.encode(record)
    owned.store.apply([StateWrite("payments-settle", corrupted, stored[1], None)], 2)
    with pytest.raises(ValueError, match="cron"):
        owned.state("payments-settle")
    assert _quarantined(owned) == Floor(7, DECIDED, "payments")


def test_a_definition_that_does_not_decode_at_all_keeps_only_the_floor(
    owned: OwnedPartition,
) -> None:
    stored = owned.store.get("payments-settle")
    assert stored is not None
    owned.store.apply([StateWrite("payments-settle", b"\x00garbage", stored[1], None)], 2)
    assert _quarantined(owned) == Floor(7, DECIDED, None)
