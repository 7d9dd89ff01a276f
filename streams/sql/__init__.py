"""The SQL databases Kairos keeps state in, SQLite embedded and PostgreSQL shared, as one layer:
what differs between the two (`dialects`) and a connection per thread (`connections`). The
executors' dedupe store and the console's view both stand on it; their SQL is their own.
"""
