"""Herd-speed encoders whose output is byte-identical to the codec's (unit tests hold them to it).

`RunRequested`: the codec encodes each definition once, a run costs a splice.

A `RunRequested` holds the leading fields (run id, schedule id, nominal, due and fired instants,
lateness), which differ from run to run; the schedule's offset (its version); and the rest (job,
attempts, overlap, partition, ticker, owner, labels, pool), which only the definition and the
partition decide. So the codec encodes one run per definition and partition, the encoder keeps
its bytes around the offset, shared by every schedule of that definition (the job, its parameters
and the labels are most of a run), and each run writes its leading fields and offset, in Avro's
binary encoding, around them. Nothing is kept per schedule but the fires decided ahead: at a million
schedules due within minutes, a template each was about 390 bytes a schedule.

`TickerProgress`: six fields, written by hand after the codec's header.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from typing import Any, Protocol

from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.instants import epoch_ms
from kairos.core.lru import LruCache
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.core.upstream_wait import UpstreamPeriod
from kairos.streams.wire.codec import Codec
from kairos.streams.wire.records import run_interval_start, run_requested_record

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_AHEAD_LIMIT = 2_000_000
_SHARED_BYTES_LIMIT = 16_384
_Parts = tuple[weakref.ref[Schedule], bytes, bytes]
"""(the definition, weakly, its runs' bytes from the leading fields to the offset, and after)."""


class UpstreamResolver(Protocol):
    """What runs of schedules naming upstream schedules wait for (`kairos.core.upstream_wait`)."""

    def expect(self, schedule: Schedule) -> None:
        """`schedule` fires soon: make its upstreams ready ahead, without blocking."""

    def upstream_periods(
        self, decision: Decision, state: ScheduleState
    ) -> Sequence[UpstreamPeriod]:
        """What the decision's run waits for, as it is fired."""


_Ahead = tuple[Decision, bytes, int, bytes]
"""(a fire decided ahead, its run's bytes up to the fired instant, its due ms, and its data
interval's start, the last field)."""


def _varint(value: int) -> bytes:
    """Avro `long`: zig-zag, then base-128 varint, least significant group first.

    Uncached for schedule offsets: each is one schedule's, so at a million schedules a cache
    would miss on every one and evict the instants it is for.
    """
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


_long = lru_cache(maxsize=65_536)(_varint)
"""`_varint`, cached: a herd's runs share their nominal, due and fired instants."""


def _string(value: str) -> bytes:
    raw = value.encode()
    return _long(len(raw)) + raw


@lru_cache(maxsize=65_536)
def _millis(instant: datetime) -> int:
    """Cached: runs fired together share their fired instant and mostly their nominal and due."""
    return epoch_ms(instant)


def _optional_instant(instant: datetime | None) -> bytes:
    # A ["null", long] union: branch index 0 for null, 1 then the value.
    return b"\x00" if instant is None else b"\x02" + _long(_millis(instant))


def _instants(instants: tuple[datetime, ...]) -> bytes:
    # An array: one block of its items, then the empty block that ends it.
    if not instants:
        return b"\x00"
    return b"".join((_long(len(instants)), *(_long(_millis(at)) for at in instants), b"\x00"))


_NO_LAST_OWNER = b"\x00"
"""A live schedule's progress has no `last_owner` (only a floor does): the null branch."""


class ProgressEncoder:
    def __init__(self, codec: Codec) -> None:
        sample = {
            "schedule_id": "",
            "schedule_offset": 0,
            "last_decided_nominal_at": None,
            "next_nominal_at": None,
            "settle_before_at": None,
            "runs_fired": 0,
            "waiting_nominals_at": [],
            "last_owner": None,
        }
        # Everything before the first field is the codec's header (single-object or registry):
        # the sample's eight fields are one zero byte each.
        whole = codec.encode(sample)
        self._header = whole[: len(whole) - len(sample)]

    def encode(self, state: ScheduleState) -> bytes:
        """Exactly `codec.encode(progress_record(state))`."""
        return b"".join(
            (
                self._header,
                _string(state.schedule_id),
                _varint(state.version),
                _optional_instant(state.last_decided_nominal),
                _optional_instant(state.next_nominal),
                _optional_instant(state.settle_before),
                _long(state.runs_fired),
                _instants(state.waiting),
                _NO_LAST_OWNER,
            )
        )


class RunRequestedEncoder:
    def __init__(
        self, codec: Codec, ticker_instance: str, upstream: UpstreamResolver | None = None
    ) -> None:
        self._codec = codec
        self._ticker_instance = ticker_instance
        self._upstream = upstream
        """Resolves what a run of a schedule naming upstream schedules waits for; such runs are
        encoded whole (few, and each carries periods of its own)."""
        self._parts: dict[tuple[int, int], _Parts] = {}
        """(`id` of a definition, partition) -> the bytes of its runs around the offset, kept
        while the definition lives: states hold it as long as they are decoded, and its entry
        goes with it (so a definition is never kept alive here, and its `id` never reused while
        its entry is). Keyed by identity: hashing a pydantic model runs Python code."""
        self._ahead: LruCache[str, _Ahead] = LruCache(_AHEAD_LIMIT)
        """Schedule id -> the fire decided ahead (idle time), with its bytes up to the fired
        instant and its data interval: a herd's fire writes only its fired instant and
        lateness."""
        self._header = _run_header(codec)
        self._shared_bytes: LruCache[bytes, bytes] = LruCache(_SHARED_BYTES_LIMIT)
        """The bytes around the offset, one object for equal values: definitions that differ
        only in what a run does not carry (the cron, say) share their job's bytes."""

    def prepare(self, state: ScheduleState, partition: int, upcoming: Decision | None) -> None:
        """Encode the schedule's definition ahead of its fires (idle time, not the herd's), and
        every byte of the `upcoming` decision's run but its fired instant and lateness."""
        if state.schedule.upstream:
            # Encoded whole when it fires; the upstream definitions are read ahead meanwhile.
            self._ahead.pop(state.schedule_id)
            if upcoming is not None and upcoming.action is Action.FIRE and self._upstream:
                self._upstream.expect(state.schedule)
            return
        if (id(state.schedule), partition) not in self._parts:
            self._build_parts(state, partition)
        if upcoming is None or upcoming.action is not Action.FIRE or upcoming.rerun is not None:
            # A skip runs nothing; a rerun's run is encoded whole (`encode`). Whatever was
            # prepared for an earlier decision is stale.
            self._ahead.pop(state.schedule_id)
            return
        ahead = self._ahead.peek(state.schedule_id)
        if ahead is None or ahead[0] is not upcoming:
            # The data interval (a few microseconds of calendar arithmetic) is worked out here,
            # in idle time, not in the herd that fires the run.
            interval = _optional_instant(run_interval_start(upcoming, state))
            self._ahead.put(state.schedule_id, (upcoming, *self._leading(upcoming), interval))

    def encode(
        self, decision: Decision, state: ScheduleState, *, fired_at: datetime, partition: int
    ) -> bytes:
        """Exactly `codec.encode(run_requested_record(...))`, at a fraction of the cost."""
        if decision.rerun is not None or state.schedule.upstream:
            # Rare: a rerun's overlap and request id differ from the schedule's other runs, and
            # a waiting run's periods are its own.
            return self._codec.encode(self._record(decision, state, fired_at, partition))
        parts = self._parts.get((id(state.schedule), partition))
        if parts is None:
            parts = self._build_parts(state, partition)
        ahead = self._ahead.peek(decision.schedule_id)  # one C call where none was prepared
        if ahead is not None:
            self._ahead.pop(decision.schedule_id)  # used once, or outdated
        if ahead is not None and ahead[0] is decision:
            # The very decision prepared ahead (an equal run id is not enough: a calendar
            # changed since may move its due instant): the fired instant and lateness are left.
            head, due_ms, interval = ahead[1], ahead[2], ahead[3]
        else:
            head, due_ms = self._leading(decision)
            interval = _optional_instant(run_interval_start(decision, state))
        fired_ms = _millis(fired_at)
        lateness_ms = max(0, fired_ms - due_ms)
        return b"".join(
            (
                head,
                _long(fired_ms),
                _long(lateness_ms),
                parts[1],
                _varint(state.version),
                parts[2],
                interval,
            )
        )

    def forget(self, schedule_id: str) -> None:
        """Drop the fire decided ahead for the schedule (it is not due soon)."""
        self._ahead.pop(schedule_id)

    def _record(
        self,
        decision: Decision,
        state: ScheduleState,
        fired_at: datetime,
        partition: int,
        *,
        with_interval: bool = True,
    ) -> dict[str, Any]:
        return run_requested_record(
            decision,
            state,
            fired_at=fired_at,
            partition=partition,
            ticker_instance=self._ticker_instance,
            with_interval=with_interval,
            upstream=self._resolved(decision, state),
        )

    def _resolved(self, decision: Decision, state: ScheduleState) -> Sequence[UpstreamPeriod]:
        if not state.schedule.upstream:
            return ()
        if self._upstream is None:
            raise ValueError(
                f"schedule {state.schedule_id} waits for upstream schedules, and this encoder "
                "was given no resolver for them"
            )
        return self._upstream.upstream_periods(decision, state)

    def _leading(self, decision: Decision) -> tuple[bytes, int]:
        """A run's bytes up to its fired instant (header, run id, schedule id, nominal and due
        instants), and its due ms."""
        due_ms = _millis(decision.fire_at)
        head = b"".join(
            (
                self._header,
                _string(decision.run_id),
                _string(decision.schedule_id),
                _long(_millis(decision.nominal)),
                _long(due_ms),
            )
        )
        return head, due_ms

    def _build_parts(self, state: ScheduleState, partition: int) -> _Parts:
        """The definition's run bytes after the leading fields, cut around the offset.

        The run is encoded twice, under its offset and under the offset with its lowest bit
        flipped, which changes the first byte of its encoding (bit 1 of the zig-zag value) and
        not its length: the two encodings are equal up to the offset and differ from its first
        byte on, so the cut depends on no byte around it (a job parameter may hold any).
        """
        nominal = state.next_nominal or _EPOCH
        decision = Decision(
            run_id(state.schedule_id, nominal), state.schedule_id, nominal, nominal, Action.FIRE
        )
        # The template's interval is null (one byte, the union's branch, at the very end):
        # each run writes its own after the definition's bytes.
        record = self._record(decision, state, nominal, partition, with_interval=False)
        one = self._codec.encode(record)[:-1]
        other = self._codec.encode({**record, "schedule_offset": state.version ^ 1})[:-1]
        differing = int.from_bytes(one, "big") ^ int.from_bytes(other, "big")
        at = len(one) - (differing.bit_length() + 7) // 8
        leading = len(self._leading(decision)[0]) + len(_long(_millis(nominal))) + len(_long(0))
        before, after = one[leading:at], one[at + len(_varint(state.version)) :]
        shared = self._shared_bytes.setdefault
        key = (id(state.schedule), partition)
        # The callback runs as the definition is freed, before its id can be anybody else's;
        # it holds the encoder weakly, so an encoder dropped (a session rebuilt) is freed at
        # once rather than by the cyclic collector.
        alive = weakref.ref(state.schedule, partial(_forget_parts, weakref.ref(self), key))
        parts = self._parts[key] = (alive, shared(before, before), shared(after, after))
        return parts


def _forget_parts(
    encoder: weakref.ref[RunRequestedEncoder], key: tuple[int, int], _: object
) -> None:
    kept = encoder()
    if kept is not None:
        kept._parts.pop(key, None)


def _run_header(codec: Codec) -> bytes:
    """What the codec writes before a run's first field (single-object or registry header)."""
    nominal = _EPOCH
    sample = ScheduleState(Schedule(id="sample", cron="* * * * *"), 0, nominal)
    decision = Decision(run_id("sample", nominal), "sample", nominal, nominal, Action.FIRE)
    record = run_requested_record(
        decision, sample, fired_at=nominal, partition=0, ticker_instance=""
    )
    whole = codec.encode(record)
    return whole[: whole.index(_string(decision.run_id) + _string("sample"))]
