"""Development infrastructure: throwaway Kafka brokers and clusters, PostgreSQL, TLS material.

For `kairos dev`, the tests and the benchmarks, never for production. The production packages
(`kairos.core`, `kairos.streams`, `kairos.services`) do not import it (tests/unit/test_layering.py).
"""
