#!/usr/bin/env bash
# Every benchmark in docs/benchmarks.md, one after the other (never two at once: they share the
# machine's cores), then the plots. About two hours on a 2-core machine. Each script starts and
# stops the servers it uses; results go to bench/results/, plots to docs/img/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=bench/results
mkdir -p "$OUT" docs/img

# The peers' servers, from Debian's packages, as .ci/run installs PostgreSQL for the tests.
need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

# Kairos against the raw transactional producer, then Kairos alone.
$PY -m bench.bench_herd --sizes 10000 100000 300000 --json "$OUT/herd.json"
$PY -m bench.bench_steady --sizes 10000 100000 --window 60 --json "$OUT/steady.json"
$PY -m bench.bench_steady --sizes 300000 --window 60 --json "$OUT/steady-300k.json"
$PY -m bench.bench_steady --sizes 1000000 --window 60 --json "$OUT/steady-1m.json"
$PY -m bench.bench_steady --sizes 1000000 --window 60 --tickers 2 --json "$OUT/steady-1m-2t.json"
$PY -m bench.bench_failover --size 10000 --window 60 --json "$OUT/failover.json"
$PY -m bench.bench_restore --sizes 10000 100000 300000 --json "$OUT/restore.json"
$PY -m bench.bench_restore --sizes 1000000 --json "$OUT/restore-1m.json"
$PY -m bench.bench_intake --sizes 100000 --rounds 3 --json "$OUT/intake-100k.json"
$PY -m bench.bench_intake --sizes 1000000 --json "$OUT/intake-1m-memory.json"
$PY -m bench.bench_store_memory --sizes 1000000

# The peers: herd and steady with failure detection tuned like Kairos's; failover both tuned
# and with each peer's defaults.
$PY -m bench.peer_apscheduler --scenarios herd steady --configs tuned \
    --sizes 10000 100000 300000 --steady-size 10000 --window 60 --timeout 120 \
    --json "$OUT/apscheduler.json"
$PY -m bench.peer_apscheduler --scenarios failover --configs tuned default \
    --steady-size 10000 --window 60 --timeout 120 --json "$OUT/apscheduler-failover.json"
$PY -m bench.peer_redbeat --scenarios herd steady --configs tuned \
    --sizes 10000 100000 --steady-sizes 10000 --window 60 --timeout 120 \
    --json "$OUT/redbeat.json"
$PY -m bench.peer_redbeat --scenarios herd --configs tuned --sizes 300000 --timeout 120 \
    --json "$OUT/redbeat-300k.json"
$PY -m bench.peer_redbeat --scenarios failover --configs tuned default \
    --steady-sizes 10000 --window 60 --timeout 120 --json "$OUT/redbeat-failover.json"

$PY -m bench.plot "$OUT"/*.json --out docs/img
