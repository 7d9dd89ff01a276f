"""The bounded LRU cache: least recently used out first, a hit refreshes, the size stays bound."""

from __future__ import annotations

import threading

import pytest

from kairos.core.lru import LruCache


def filled(*keys: str, capacity: int = 3) -> LruCache[str, int]:
    cache: LruCache[str, int] = LruCache(capacity)
    for number, key in enumerate(keys):
        cache.put(key, number)
    return cache


def kept(cache: LruCache[str, int], *keys: str) -> list[str]:
    """Which of `keys` the cache still holds (asking refreshes them: ask last)."""
    return [key for key in keys if cache.get(key) is not None]


def test_the_least_recently_put_goes_first_when_full() -> None:
    cache = filled("a", "b", "c", "d")
    assert len(cache) == 3
    assert kept(cache, "a", "b", "c", "d") == ["b", "c", "d"]


def test_a_get_refreshes_recency() -> None:
    cache = filled("a", "b", "c")
    assert cache.get("a") == 0
    cache.put("d", 3)
    assert kept(cache, "a", "b", "c", "d") == ["a", "c", "d"]


def test_setdefault_answers_what_is_kept_refreshed_else_keeps_the_value() -> None:
    cache = filled("a", "b", "c")
    assert cache.setdefault("a", 99) == 0
    assert cache.setdefault("d", 3) == 3
    assert kept(cache, "a", "b", "c", "d") == ["a", "c", "d"]
    assert cache.setdefault("d", 42) == 3


def test_a_peek_answers_without_refreshing() -> None:
    cache = filled("a", "b", "c")
    assert cache.peek("a") == 0
    assert cache.peek("z") is None
    cache.put("d", 3)
    assert kept(cache, "a", "b", "c", "d") == ["b", "c", "d"], "a peeked key still goes first"


def test_a_peek_sees_what_was_put_and_cleared() -> None:
    cache = filled("a")
    cache.put("a", 5)
    assert cache.peek("a") == 5
    cache.clear()
    assert cache.peek("a") is None


def test_putting_a_kept_key_again_refreshes_and_replaces_it() -> None:
    cache = filled("a", "b", "c")
    cache.put("a", 10)
    cache.put("d", 3)
    assert len(cache) == 3
    assert cache.get("a") == 10
    assert cache.get("b") is None


def test_a_miss_answers_the_default_and_changes_nothing() -> None:
    cache = filled("a", "b", "c")
    assert cache.get("z") is None
    assert cache.get("z", -1) == -1
    cache.put("d", 3)
    assert kept(cache, "a", "b", "c", "d") == ["b", "c", "d"]


def test_none_is_a_value_like_any_other_with_a_default() -> None:
    cache: LruCache[str, int | None] = LruCache(2)
    cache.put("never fires", None)
    missing = object()
    assert cache.get("never fires", missing) is None
    assert cache.get("not asked", missing) is missing


def test_pop_and_clear_forget() -> None:
    cache = filled("a", "b", "c")
    assert cache.pop("b") == 1
    assert cache.pop("b") is None
    assert len(cache) == 2
    cache.put("d", 3)
    assert kept(cache, "a", "c", "d") == ["a", "c", "d"], "a pop frees a place"
    cache.clear()
    assert len(cache) == 0


def test_the_size_stays_bound_over_many_keys() -> None:
    cache: LruCache[int, int] = LruCache(100)
    for key in range(10_000):
        cache.put(key, key)
        assert len(cache) <= 100
    assert [key for key in range(10_000) if cache.get(key) is not None] == list(
        range(9_900, 10_000)
    )


def test_a_capacity_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 entry; 0 was asked"):
        LruCache(0)


def test_threads_sharing_a_cache_read_right_values_and_never_raise() -> None:
    """As compiled crons are shared: races may cost misses, never a wrong value or an error."""
    cache: LruCache[int, int] = LruCache(8)
    failures: list[BaseException] = []

    def hammer(offset: int) -> None:
        try:
            for step in range(20_000):
                key = (step + offset) % 24
                value = cache.get(key)
                assert value is None or value == key * key
                cache.put(key, key * key)
        except BaseException as failure:
            failures.append(failure)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(cache) <= 8
