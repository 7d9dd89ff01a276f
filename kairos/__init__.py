"""Kairos: a distributed job scheduler on Kafka.

Every scheduled run happens: late, never lost, and never fired twice.

`kairos.core` holds the pure domain (calendar math, policies, run ids), `kairos.streams` the thin
Kafka, Avro and RocksDB plumbing, `kairos.services` the long-running processes built from both,
and `kairos.cli` the `kairos` command. `kairos.devinfra` is development infrastructure (the local
Kafka and PostgreSQL behind `kairos dev` and the tests), never imported by core, streams or
services.
"""

__version__ = "0.1.0"
