"""The cost of a cache hit and miss: `LruCache.get` against the plain dict lookups it replaced.

Run: `.venv/bin/python bench/bench_lru.py [--calls 2000000]`.

- dict: `key in cache` then `cache[key]`, as CompiledCron.next_after looked its answers up;
- dict.get: one `cache.get(key)`, as the run encoder and the day plans did;
- LruCache.get: a lookup and a move to the most recent end.
Every figure is the best of five runs over the same keys, in nanoseconds per call, the loop's
own cost taken off: hits ask kept keys, misses keys never put.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

from kairos.core.lru import LruCache

KEYS = 16
"""The size of CompiledCron's caches: the herd's hot path."""


Keys = list[tuple[float, bool]]


def best_ns(lookup: Callable[[Keys], None], asked: Keys) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter_ns()
        lookup(asked)
        best = min(best, (time.perf_counter_ns() - started) / len(asked))
    return best


def empty_loop(asked: Keys) -> None:
    for _ in asked:
        pass


def lookups(
    plain: dict[tuple[float, bool], str], lru: LruCache[tuple[float, bool], str]
) -> dict[str, Callable[[Keys], None]]:
    def with_in(asked: Keys) -> None:
        for key in asked:
            if key in plain:
                plain[key]

    def with_get(asked: Keys) -> None:
        get = plain.get
        for key in asked:
            get(key)

    def with_lru(asked: Keys) -> None:
        get = lru.get
        for key in asked:
            get(key)

    return {"dict in+[]": with_in, "dict.get": with_get, "LruCache.get": with_lru}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2_000_000)
    calls = parser.parse_args().calls
    keys = [(float(1_800_000_000 + i), False) for i in range(KEYS)]
    plain = dict.fromkeys(keys, "fire")
    lru: LruCache[tuple[float, bool], str] = LruCache(KEYS)
    for key in keys:
        lru.put(key, "fire")
    hits = [keys[i % KEYS] for i in range(calls)]
    misses = [(key[0] + 0.5, key[1]) for key in hits]

    loop = best_ns(empty_loop, hits)
    print(f"python {platform.python_version()}, {calls} calls over {KEYS} keys, ns per call:")
    print(f"  {'':<14} {'hit':>6} {'miss':>6}")
    for name, lookup in lookups(plain, lru).items():
        hit = best_ns(lookup, hits) - loop
        miss = best_ns(lookup, misses) - loop
        print(f"  {name:<14} {hit:6.1f} {miss:6.1f}")


if __name__ == "__main__":
    main()
