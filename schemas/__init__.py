"""Avro schemas of every Kairos record, as package data.

`io.kairos.v1.<Name>.avsc` holds the current version of each named type (fastavro's `load_schema`
naming convention); `history/v<N>/` holds every released version, the current one included.
`kairos.streams.wire.avro_schemas` loads them; `docs/wire-format.md` gives the rules for
changing them.
"""
