"""Thin plumbing to Kafka, Avro, RocksDB and SQL; domain decisions live in `kairos.core`.

One room per concern, each importing only the rooms below it (tests/unit/test_layering.py):

- `kafka`: the clients, the topics and their configuration, ACLs and the broker's answers;
- `wire`: the formats on the topics, each with one owner (Avro codecs, records, signatures);
- `state`: the ticker's RocksDB store of one partition and its changelog;
- `readers`: the topics read back, as tables (schedules, calendars, teams) and as history;
- `client`: the producer SDK's write side: changes checked, signed, acknowledged;
- `dedupe`: the executors' SQL store of runs (SQLite and PostgreSQL), standing alone.
"""
