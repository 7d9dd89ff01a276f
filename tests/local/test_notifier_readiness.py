"""A real notifier process is ready once its group gave it partitions, not merely once its loop
turns: a notifier that reaches no broker tells no one, and a readiness probe must say so."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import eventually
from tests.probe_client import free_port, get
from tests.processes import ServiceProcess

NO_BROKER = "127.0.0.1:9"
"""The discard port: nothing listens there, so every connection is refused at once."""


def test_a_notifier_that_reaches_no_broker_is_live_but_not_ready(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text("teams: {}\n")
    routes.chmod(0o600)
    port = free_port()
    arguments = ["--bootstrap-servers", NO_BROKER, "notifier", "--instance", "n1",
                 "--routes-file", str(routes), "--metrics-port", str(port)]  # fmt: skip
    notifier = ServiceProcess(arguments, tmp_path / "n1.log")
    try:
        unready = (503, "joining the group: no partition assignment received yet\n")
        eventually(
            lambda: get(port, "/readyz") == unready,
            timeout_s=30,
            interval_s=0.2,
            message=f"the notifier's loop never turned: {notifier.log()[-2000:]}",
        )
        assert get(port, "/livez") == (200, "ok\n")
    finally:
        assert notifier.stop() == 0, notifier.log()[-3000:]
