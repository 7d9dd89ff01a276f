"""Kafka itself: the ports the services use, the topics and their configuration, connection
settings, ACLs and permissions, partition ownership, and which broker answers pass or last.

Nothing here knows a record's format (that is `wire`).
"""
