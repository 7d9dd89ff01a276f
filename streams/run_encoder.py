"""Herd-speed encoders whose output is byte-identical to the codec's (unit tests hold them to it).

`RunRequested`: the codec encodes each schedule once, a run costs a splice.

Of a `RunRequested`, only the leading fields (run id, schedule id, nominal, due and fired
instants, lateness) differ between two runs of one schedule version on one partition; the rest
(job, attempts, overlap, partition, version, ticker, owner) is the same every time. So the codec
encodes one whole record per schedule version, the encoder keeps the bytes around those leading
fields as a template, and each run writes only the leading fields, in Avro's binary encoding,
between them. The bytes after them are kept in three parts, the schedule's offset alone in the
middle: the parts around it are shared by every schedule of the same definition (the job, its
parameters and the labels are most of a run).

`TickerProgress`: six fields, written by hand after the codec's header.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.lru import LruCache
from kairos.core.run_id import run_id
from kairos.streams.codec import Codec
from kairos.streams.records import run_requested_record

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_TEMPLATE_LIMIT = 2_000_000
_SHARED_PARTS_LIMIT = 16_384
_Template = tuple[int, bytes, bytes, bytes, bytes, bytes, Decision | None, bytes, int, int]
"""(schedule version, bytes before the leading fields, the encoded schedule id; the bytes after
them in three parts: up to the schedule's offset, the offset, the rest; then the fire decided
ahead, its bytes up to the fired instant, and its due ms; the partition the bytes name)."""


@lru_cache(maxsize=65_536)
def _long(value: int) -> bytes:
    """Avro `long`: zig-zag, then base-128 varint, least significant group first.

    Cached: a herd's runs share their nominal, due and fired instants.
    """
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def _string(value: str) -> bytes:
    raw = value.encode()
    return _long(len(raw)) + raw


@lru_cache(maxsize=65_536)
def _millis(instant: datetime) -> int:
    """Cached: runs fired together share their fired instant and mostly their nominal and due."""
    return (instant - _EPOCH) // _MS


def _optional_instant(instant: datetime | None) -> bytes:
    # A ["null", long] union: branch index 0 for null, 1 then the value.
    return b"\x00" if instant is None else b"\x02" + _long(_millis(instant))


class ProgressEncoder:
    def __init__(self, codec: Codec) -> None:
        sample = {
            "schedule_id": "",
            "schedule_offset": 0,
            "last_decided_nominal_at": None,
            "next_nominal_at": None,
            "settle_before_at": None,
            "runs_fired": 0,
        }
        # Everything before the first field is the codec's header (single-object or registry):
        # the sample's six fields are one zero byte each.
        whole = codec.encode(sample)
        self._header = whole[: len(whole) - len(sample)]

    def encode(self, state: ScheduleState) -> bytes:
        """Exactly `codec.encode(progress_record(state))`."""
        return b"".join(
            (
                self._header,
                _string(state.schedule_id),
                _long(state.version),
                _optional_instant(state.last_decided_nominal),
                _optional_instant(state.next_nominal),
                _optional_instant(state.settle_before),
                _long(state.runs_fired),
            )
        )


class RunRequestedEncoder:
    def __init__(self, codec: Codec, ticker_instance: str) -> None:
        self._codec = codec
        self._ticker_instance = ticker_instance
        # One template per schedule, of the version and partition it was built for: a new one
        # replaces it rather than leaving the old one to age out of the LRU. Keyed by the id
        # alone: a (id, partition) key was 64 bytes more per schedule due soon.
        self._templates: LruCache[str, _Template] = LruCache(_TEMPLATE_LIMIT)
        self._headers: dict[bytes, bytes] = {}
        """Every template's leading bytes, shared: a handful of distinct values."""
        self._shared_parts: LruCache[bytes, bytes] = LruCache(_SHARED_PARTS_LIMIT)
        """The bytes around the schedule offset, shared by the templates of schedules equal
        but for their id and offset (the job, its parameters, the labels: most of a run)."""

    def prepare(self, state: ScheduleState, partition: int, upcoming: Decision | None) -> None:
        """Build the schedule's template ahead of its fires (idle time, not the herd's), with
        every byte of the `upcoming` decision's run but its fired instant and lateness."""
        if upcoming is not None and (
            upcoming.action is not Action.FIRE or upcoming.rerun is not None
        ):
            upcoming = None  # a skip runs nothing; a rerun's run is encoded whole (`encode`)
        template = self._kept(state.schedule_id, state.version, partition)
        if template is None:
            nominal = state.next_nominal or _EPOCH
            decision = upcoming or Decision(
                run_id(state.schedule_id, nominal), state.schedule_id, nominal, nominal, Action.FIRE
            )
            template = self._template(decision, state, decision.fire_at, partition)
        if upcoming is not None and upcoming is not template[6]:
            self._templates.put(state.schedule_id, _upcoming(template, upcoming))

    def encode(
        self, decision: Decision, state: ScheduleState, *, fired_at: datetime, partition: int
    ) -> bytes:
        """Exactly `codec.encode(run_requested_record(...))`, at a fraction of the cost."""
        if decision.rerun is not None:
            # Rare, and its overlap and request id differ from the schedule's template.
            return self._codec.encode(self._record(decision, state, fired_at, partition))
        template = self._kept(decision.schedule_id, state.version, partition)
        if template is None:
            template = self._template(decision, state, fired_at, partition)
        fired_ms = _millis(fired_at)
        if template[6] is decision:
            # The very decision prepared ahead (an equal run id is not enough: a calendar
            # changed since may move its due instant): the fired instant and lateness are left.
            head, due_ms = template[7], template[8]
        else:
            head, due_ms = _leading(template, decision)
        lateness_ms = max(0, fired_ms - due_ms)
        return b"".join(
            (head, _long(fired_ms), _long(lateness_ms), template[3], template[4], template[5])
        )

    def _record(
        self, decision: Decision, state: ScheduleState, fired_at: datetime, partition: int
    ) -> dict[str, Any]:
        return run_requested_record(
            decision,
            state,
            fired_at=fired_at,
            partition=partition,
            ticker_instance=self._ticker_instance,
        )

    def forget(self, schedule_id: str) -> None:
        """Drop the schedule's template (it is not due soon: built again when it is)."""
        self._templates.pop(schedule_id)

    def _kept(self, schedule_id: str, version: int, partition: int) -> _Template | None:
        # Not refreshed: prepared again before each fire, which puts it when it changes.
        template = self._templates.peek(schedule_id)
        if template is None or template[0] != version or template[9] != partition:
            return None
        return template

    def _template(
        self, decision: Decision, state: ScheduleState, fired_at: datetime, partition: int
    ) -> _Template:
        record = self._record(decision, state, fired_at, partition)
        whole = self._codec.encode(record)
        schedule_id = _string(decision.schedule_id)
        leading = (
            _string(decision.run_id)
            + schedule_id
            + _long(_millis(decision.nominal))
            + _long(_millis(decision.fire_at))
            + _long(_millis(fired_at))
            + _long(record["lateness_ms"])
        )
        start = whole.index(leading)
        header = self._headers.setdefault(whole[:start], whole[:start])
        before, offset, after = self._split_at_offset(
            whole[start + len(leading) :], partition, state.version
        )
        template = (
            state.version,
            header,
            schedule_id,
            before,
            offset,
            after,
            None,
            b"",
            0,
            partition,
        )
        return self._templates.put(decision.schedule_id, template)

    def _split_at_offset(
        self, tail: bytes, partition: int, version: int
    ) -> tuple[bytes, bytes, bytes]:
        """`tail` cut around its schedule offset, the parts around it shared. The offset is
        found by its bytes between the partition's and the ticker's name, as the schema orders
        them; where a job parameter happens to hold the same bytes, the cut falls there
        instead, and the parts still join into `tail` (they are only not shared)."""
        encoded_partition, encoded_offset = _long(partition), _long(version)
        anchor = encoded_partition + encoded_offset + _string(self._ticker_instance)
        at = tail.index(anchor) + len(encoded_partition)
        end = at + len(encoded_offset)
        before, after = tail[:at], tail[end:]
        shared = self._shared_parts.setdefault
        return shared(before, before), tail[at:end], shared(after, after)


def _leading(template: _Template, decision: Decision) -> tuple[bytes, int]:
    """A run's bytes up to its fired instant (header, run id, schedule id, nominal and due
    instants), and its due ms."""
    due_ms = _millis(decision.fire_at)
    head = b"".join(
        (
            template[1],
            _string(decision.run_id),
            template[2],
            _long(_millis(decision.nominal)),
            _long(due_ms),
        )
    )
    return head, due_ms


def _upcoming(template: _Template, decision: Decision) -> _Template:
    head, due_ms = _leading(template, decision)
    return (*template[:6], decision, head, due_ms, template[9])
