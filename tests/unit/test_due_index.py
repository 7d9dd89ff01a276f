"""The in-memory due index against a plain model of it, under any sequence of moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.streams.state.due_index import DueIndex

IDS = [f"s{n}" for n in range(6)]
moves = st.lists(
    st.tuples(st.sampled_from(IDS), st.none() | st.sampled_from([1_000, 2_000, 3_000])),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(moves)
def test_the_index_answers_as_its_model_whatever_the_moves(
    sequence: list[tuple[str, int | None]],
) -> None:
    index = DueIndex()
    model: dict[int, list[str]] = {}  # instant -> ids, in the order they became due there
    for schedule_id, due_ms in sequence:
        for ids in model.values():
            if schedule_id in ids:
                ids.remove(schedule_id)
        if due_ms is not None:
            model.setdefault(due_ms, []).append(schedule_id)
        model = {instant: ids for instant, ids in model.items() if ids}
        index.move(schedule_id, due_ms)
        expected = sorted(model.items())
        assert list(index.instants(0, 10_000)) == expected
        assert index.count(0, 10_000) == sum(len(ids) for ids in model.values())
        assert index.count(1_500, 2_500) == len(model.get(2_000, []))
        assert index.first() == (expected[0][0] if expected else None)
        assert len(index) == sum(len(ids) for ids in model.values())
        for instant, ids in model.items():
            assert all(index.due_of(i) == instant for i in ids)


def test_a_herd_drained_to_one_schedule_and_refilled_keeps_its_order() -> None:
    index = DueIndex()
    for schedule_id in ("a", "b", "c"):
        index.move(schedule_id, 5_000)
    index.move("a", None)
    index.move("b", 6_000)
    index.move("d", 5_000)
    index.move("a", 5_000)
    assert list(index.instants(0, 10_000)) == [(5_000, ["c", "d", "a"]), (6_000, ["b"])]
