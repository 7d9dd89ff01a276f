"""The SQL layer's own rules (`kairos.streams.sql`): a connection per live thread, and URLs
shown without their password whatever their shape."""

from __future__ import annotations

import threading

import pytest

from kairos.streams.sql.connections import ThreadConnections
from kairos.streams.sql.dialects import shown_url

pytestmark = pytest.mark.unit


class _Connection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _connections() -> tuple[ThreadConnections[_Connection], list[_Connection]]:
    made: list[_Connection] = []

    def connect() -> _Connection:
        made.append(_Connection())
        return made[-1]

    return ThreadConnections(connect, _Connection.close), made


def test_each_thread_has_its_own_connection_made_once() -> None:
    connections, made = _connections()
    mine = connections.get()
    assert connections.get() is mine
    theirs: list[_Connection] = []
    worker = threading.Thread(target=lambda: theirs.append(connections.get()))
    worker.start()
    worker.join()
    assert theirs[0] is not mine
    assert made == [mine, theirs[0]]


def test_the_connections_of_ended_threads_are_not_kept() -> None:
    """A console's page threads come and go: none may leave its connection behind."""
    connections, made = _connections()
    for _ in range(50):
        worker = threading.Thread(target=connections.get)
        worker.start()
        worker.join()
    connections.get()
    connections.close_all()
    assert len(made) == 51
    assert [connection.closed for connection in made].count(True) == 1, (
        "close_all closes the live threads' connections only; ended ones were let go"
    )


def test_a_dropped_connection_is_closed_and_made_again() -> None:
    connections, made = _connections()
    first = connections.get()
    connections.drop()
    assert first.closed
    assert connections.get() is not first
    assert len(made) == 2


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://kairos:secret@db:5432/kairos", "postgresql://kairos:***@db:5432/kairos"),
        ("postgresql://kairos:pa?ss#w@db:5432/kairos", "postgresql://kairos:***@db:5432/kairos"),
        ("postgresql://kairos:p@ss@db:54x/kairos", "postgresql://kairos:***@db:54x/kairos"),
        ("postgresql://kairos@db/kairos", "postgresql://kairos@db/kairos"),
        ("sqlite:////var/lib/kairos/view.sqlite", "sqlite:////var/lib/kairos/view.sqlite"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert shown_url(url) == shown
