"""A connection per thread to one database: the executor's loop, its heartbeat and its workers,
or the console's follower and its pages, each use their own, so none waits on another's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

C = TypeVar("C")


class ThreadConnections(Generic[C]):
    """This thread's connection (made by `connect` on first use), and every live thread's to
    close."""

    def __init__(self, connect: Callable[[], C], close: Callable[[C], None]) -> None:
        self._connect = connect
        self._close = close
        self._local = threading.local()
        self._of_thread: dict[threading.Thread, C] = {}
        self._lock = threading.Lock()

    def get(self) -> C:
        connection: C | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            self._local.connection = connection
            with self._lock:
                # A thread that ended left its connection to its thread-local, which frees it:
                # kept here, a console's short-lived page threads would each leak one.
                self._of_thread = {
                    thread: kept for thread, kept in self._of_thread.items() if thread.is_alive()
                }
                self._of_thread[threading.current_thread()] = connection
        return connection

    def drop(self) -> None:
        """Forget this thread's connection (an error left it in doubt); the next `get` makes a
        new one."""
        connection: C | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is None:
            return
        with self._lock:
            self._of_thread.pop(threading.current_thread(), None)
        self._closed(connection)

    def close_all(self) -> None:
        with self._lock:
            connections, self._of_thread = list(self._of_thread.values()), {}
        for connection in connections:
            self._closed(connection)

    def _closed(self, connection: C) -> None:
        try:
            self._close(connection)
        except Exception as error:
            logger.debug("closing a database connection: %s", error)
