"""The probes' decisions (`kairos.services.probes`), the build's metric, the console's routes.

The probe server itself, and a real loop that stops turning: tests/local/test_probe_server.py;
real ticker and executor processes: tests/broker/test_probes.py.
"""

from __future__ import annotations

import asyncio
from importlib.metadata import version
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from kairos.services.build import DISTRIBUTION, installed_version, register_build_info
from kairos.services.console.app import probe_routes
from kairos.services.probes import LoopHealth, group_readiness, stall_limit_s
from kairos.streams.kafka.settings import KafkaSettings


def test_a_loop_that_turned_within_the_limit_is_alive() -> None:
    health = LoopHealth(stall_limit_s=330, now_s=1000.0)
    assert health.liveness(now_s=1000.0) is None
    assert health.liveness(now_s=1330.0) is None


def test_a_loop_without_a_turn_for_longer_than_the_limit_is_not_alive() -> None:
    health = LoopHealth(stall_limit_s=330, now_s=1000.0)
    assert health.liveness(now_s=1412.0) == (
        "the main loop has completed no turn for 412s (limit 330s)"
    )


def test_a_turn_brings_a_stalled_loop_back_to_life() -> None:
    health = LoopHealth(stall_limit_s=10, now_s=0.0)
    assert health.liveness(now_s=11.0) is not None
    health.turned(11.0, unready_because=None)
    assert health.liveness(now_s=20.0) is None


def test_a_service_is_not_ready_until_its_loop_says_so() -> None:
    health = LoopHealth(stall_limit_s=10, now_s=0.0)
    assert health.readiness() == "starting"
    health.turned(1.0, unready_because="joining")
    assert health.readiness() == "joining"
    health.turned(2.0, unready_because=None)
    assert health.readiness() is None


@pytest.mark.parametrize(
    ("connected", "assigned", "reason"),
    [
        (False, False, "not connected: opening its clients to join the group"),
        (True, False, "joining the group: no partition assignment received yet"),
        (True, True, None),
    ],
)
def test_a_member_is_ready_once_the_group_gave_it_an_assignment(
    connected: bool, assigned: bool, reason: str | None
) -> None:
    assert group_readiness(connected, assigned) == reason


def test_the_stall_limit_is_the_groups_max_poll_interval_and_a_slack() -> None:
    default = KafkaSettings(bootstrap_servers="k:9092")
    assert stall_limit_s(default) == 330.0
    longer = KafkaSettings(
        bootstrap_servers="k:9092", properties={"max.poll.interval.ms": "600000"}
    )
    assert stall_limit_s(longer) == 630.0


def test_build_info_names_the_installed_distributions_version() -> None:
    registry = CollectorRegistry()
    register_build_info(registry)
    assert installed_version() == version(DISTRIBUTION)
    assert registry.get_sample_value("kairos_build_info", {"version": version(DISTRIBUTION)}) == 1


def _get(app: Starlette, path: str) -> tuple[int, str]:
    """One GET through the ASGI interface: (status, body)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}
    asyncio.run(app(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body.decode()


def test_the_console_serves_its_build_and_answers_its_probes() -> None:
    app = Starlette(routes=probe_routes())
    status, metrics = _get(app, "/metrics")
    assert status == 200
    assert f'kairos_build_info{{version="{version(DISTRIBUTION)}"}} 1.0' in metrics
    assert _get(app, "/livez") == (200, "ok\n")
    assert _get(app, "/readyz") == (200, "ok\n")
