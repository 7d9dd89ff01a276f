"""The ticker's local state of one schedules partition: the RocksDB store, its in-memory due
index, and the changelog topic's format that restores it.
"""
