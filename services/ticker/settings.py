"""A ticker's settings: one frozen model, filled at the CLI edge."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from kairos.core.clock import DEFAULT_MAX_CLOCK_AHEAD_MS
from kairos.core.errors import KairosError
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.state.state_store import DEFAULT_STORE_MEMORY_MB


class TickerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    state_dir: Path
    group_id: str | None = None
    """The tickers' consumer group; `None`: the deployment's own, `<topic prefix>tickers`."""
    session_timeout_ms: int = Field(default=10_000, ge=500)
    transaction_timeout_ms: int = Field(default=10_000, ge=1_000)
    max_decisions_per_transaction: int = Field(default=50_000, ge=1)
    catchup_per_transaction: int = Field(default=20_000, ge=1)
    """Late occurrences (a backlog) one transaction may fire, after its on-time ones. At about
    0.1 ms each on a 2-core machine, a full slice adds about 2 s to a transaction; 2,000 drained
    a backlog too slowly to catch up under a steady 5,000 fires/s (docs/benchmarks.md)."""
    max_wait_s: float = Field(default=0.1, gt=0)
    restore_timeout_s: float = Field(default=300, gt=0)
    max_clock_ahead_ms: int = Field(default=DEFAULT_MAX_CLOCK_AHEAD_MS, ge=0)
    state_store_memory_mb: int = Field(default=DEFAULT_STORE_MEMORY_MB, ge=8)
    """What RocksDB may hold in memory for all the ticker's partition stores together
    (`StoreMemory`): their block cache, with the memtables charged to it."""
    metrics_host: str = Field(default=DEFAULT_METRICS_HOST, min_length=1)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Where `/metrics`, `/livez` and `/readyz` are served (`kairos.services.probes`); port 0:
    a free one, logged; `None`: no server."""
    ownership: Ownership = Ownership.OPEN
    ownership_from: Ownership | None = None
    """The mode the deployment is switching from: partitions last committed in it are taken over
    too (`kairos.streams.kafka.ownership.mode_refusal`); `None`: only partitions committed in
    `ownership` (or never, or without a recorded mode)."""
    signature_max_age_s: float = Field(default=300, gt=0)
    """How far apart a signed change's signing instant and the broker's append time may be:
    a record replayed later than this is refused."""

    def group(self, kafka: KafkaSettings) -> str:
        return self.group_id or kafka.deployment_id(TICKER_GROUP)


class StateDirError(KairosError):
    """The ticker cannot keep its stores where it was told to."""


def ensure_state_dir(state_dir: Path) -> None:
    """Create the state directory before joining the group: one that cannot be created would
    otherwise fail every partition assignment, retried forever."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StateDirError(
            f"--state-dir {state_dir}: cannot create it ({error.strerror}: {error.filename}); "
            "give the ticker a directory it can write"
        ) from None
