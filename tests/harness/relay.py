"""A TCP port that comes up late: a server (PostgreSQL) that is not there yet when a
process starts, then is. `LatePort.port` refuses connections until `open()`, from when
every connection is relayed to the real server; `close()` takes it down again, `cut()`
breaks the connections open through it too (the server lost mid-work)."""

from __future__ import annotations

import contextlib
import socket
import threading


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LatePort:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()  # nothing listens on it until open()
        self._server: socket.socket | None = None
        self._live: list[socket.socket] = []  # the relayed connections' both ends
        self._lock = threading.Lock()

    def open(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            with contextlib.suppress(OSError):  # wakes the accept() of the other thread:
                self._server.shutdown(socket.SHUT_RDWR)  # a close alone leaves it listening
            self._server.close()
            self._server = None

    def cut(self) -> None:
        """The server gone mid-work: no new connection, and every open one broken."""
        self.close()
        with self._lock:
            live, self._live = self._live, []
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._live += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """One direction; each socket is the source of one pipe, which closes it."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
    source.close()
