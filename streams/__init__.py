"""Thin plumbing to Kafka, Avro and RocksDB; domain decisions live in `kairos.core`."""
