"""The formats on the topics, each owned by one module: the Avro schemas and codecs, the mapping
between domain objects and records, the schedule, calendar and history contracts, signatures,
and dead letters. Encoding and decoding only: nothing here reads or writes a topic.
"""
