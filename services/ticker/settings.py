"""A ticker's settings: one frozen model, filled at the CLI edge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field

from kairos.core.clock import DEFAULT_MAX_CLOCK_AHEAD_MS
from kairos.core.errors import KairosError
from kairos.services.probes import DEFAULT_METRICS_HOST
from kairos.services.settings_fields import ServiceSettings, Setting
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.state.state_store import DEFAULT_STORE_MEMORY_MB


class TickerSettings(ServiceSettings):
    """How one ticker runs; `kairos ticker` takes each field as an option (`--help` lists them)."""

    instance: Annotated[str, Setting(env="KAIROS_TICKER_INSTANCE")] = Field(
        min_length=1, pattern=r"^[A-Za-z0-9._-]+$"
    )
    """This ticker's unique name (letters, digits, '.', '_' and '-')."""
    state_dir: Path
    """Where the RocksDB stores of owned partitions live."""
    group_id: Annotated[str | None, Setting(env="KAIROS_TICKER_GROUP")] = None
    """Consumer group of the tickers; default: the deployment's, <topic prefix>tickers."""
    session_timeout_ms: int = Field(default=10_000, ge=500)
    """How long a silent ticker keeps its partitions before another takes over."""
    transaction_timeout_ms: int = Field(default=10_000, ge=1_000)
    """How long a transaction may stay open before the broker aborts it; a ticker whose turn
    takes longer is fenced and starts again."""
    max_decisions_per_transaction: int = Field(default=50_000, ge=1)
    """The most occurrences one transaction decides: a herd's fires are split over several."""
    catchup_per_transaction: int = Field(default=20_000, ge=1)
    """Late occurrences (a backlog) one transaction may fire, after its on-time ones. At about
    0.1 ms each on a 2-core machine, a full slice adds about 2 s to a transaction; 2,000 drained
    a backlog too slowly to catch up under a steady 5,000 fires/s (docs/benchmarks.md)."""
    max_wait_s: float = Field(default=0.1, gt=0)
    """The longest a turn waits for schedule changes before it looks for due occurrences."""
    restore_timeout_s: float = Field(default=300, gt=0)
    """How long restoring a partition's store from its changelog may take before the take-over
    is given up and tried again (a broker answering too slowly)."""
    max_clock_ahead_ms: int = Field(default=DEFAULT_MAX_CLOCK_AHEAD_MS, ge=0)
    """How far ahead of the broker's clock this host's may be before the ticker refuses to fire
    (its fires would start early)."""
    state_store_memory_mb: int = Field(default=DEFAULT_STORE_MEMORY_MB, ge=8)
    """Megabytes RocksDB may hold in memory for all this ticker's partition stores together
    (block cache and memtables; at least 8)."""
    metrics_host: str = Field(default=DEFAULT_METRICS_HOST, min_length=1)
    """The address --metrics-port listens on: this host only by default; 0.0.0.0 for every
    interface (a container whose probes and scraper come from outside)."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve /metrics, /livez and /readyz on this port (0: a free one, logged); default: no
    server (`kairos.services.probes`)."""
    ownership: Ownership = Ownership.OPEN
    """signed: take a schedule change only when a registered team that may make it signed it
    (docs/teams.md); open: take every change (one team, or a trusted few)."""
    ownership_from: Ownership | None = None
    """The mode the deployment is switching from: take over partitions last committed in it
    too. Without it a ticker refuses (exit 2) a partition last committed in another mode than
    --ownership; drop it once `kairos partitions` shows every partition in the new mode."""
    signature_max_age_s: float = Field(default=300, ge=1)
    """With --ownership signed: seconds a change's signing may lie from when the broker appended
    it; a record replayed later is refused."""

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
