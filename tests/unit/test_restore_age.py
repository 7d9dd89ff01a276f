"""When a ticker must not trust its local store: it may have missed a compacted deletion."""

from __future__ import annotations

from kairos.services.ticker.restore import too_old_for_warm_restore
from kairos.streams.kafka.topics import CHANGELOG_DELETE_RETENTION_MS

NOW = 1_900_000_000_000


def test_a_recent_store_restores_warm() -> None:
    assert not too_old_for_warm_restore(NOW - 60_000, NOW)


def test_a_store_older_than_half_the_deletion_retention_restores_cold() -> None:
    half = CHANGELOG_DELETE_RETENTION_MS // 2
    assert not too_old_for_warm_restore(NOW - half, NOW)
    assert too_old_for_warm_restore(NOW - half - 1, NOW)


def test_a_store_that_never_recorded_its_age_restores_cold() -> None:
    assert too_old_for_warm_restore(None, NOW)
