"""Thin plumbing to Kafka, Avro, RocksDB and SQL; domain decisions live in `kairos.core`.

One room per concern, each importing only the rooms below it (tests/unit/test_layering.py):

- `kafka`: the clients, the topics and their configuration, ACLs and the broker's answers;
- `wire`: the formats on the topics, each with one owner (Avro codecs, records, signatures);
- `state`: the ticker's RocksDB store of one partition and its changelog;
- `readers`: the topics read back, as tables (schedules, calendars, teams) and as history;
- `client`: the producer SDK's write side: changes checked, signed, acknowledged;
- `sql`: SQLite and PostgreSQL as one layer: dialects and a connection per thread;
- `dedupe`: the executors' SQL store of runs, on `sql` (the console's view stands on it too).
"""
