"""Asking a process's probe server (`kairos.services.probes`) as a kubelet or Prometheus would."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

ANOTHER_LOOPBACK = "127.0.0.2"
"""An address of this host that is not 127.0.0.1 (Linux routes all of 127/8 to loopback): a
server bound to 127.0.0.1 refuses it, one bound to every interface answers it."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get(port: int, path: str, host: str = "127.0.0.1") -> tuple[int, str]:
    """(status, body) of `GET path`; (0, why) when nothing answers there (yet)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)
