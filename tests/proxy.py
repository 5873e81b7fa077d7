"""A TCP proxy in front of PostgreSQL that cuts a connection right after a commit.

Used to lose the connection at the one instant a real outage makes ambiguous:
the server has committed, the client never hears so. Armed with a marker the
client sends (``COMMIT``, or the text of a statement) and a marker of the
server's reply (the ``CommandComplete`` tag), it forwards everything until a
server reply carrying the tag follows the client's marker on the same
connection; that reply is dropped and both sockets closed, once. Armed with no
server marker, it cuts as the client sends its marker, which never reaches the
server: the other side of the same instant (a ``COMMIT`` lost on its way, so
nothing committed and the client cannot know).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit, urlunsplit


class CuttingProxy:
    def __init__(self, host: str, port: int) -> None:
        """``host`` may be a socket directory (the embedded server listens on a Unix socket only)."""
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.client_marker: bytes | None = None
        self.server_marker: bytes | None = None
        self.cuts = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    def arm(self, client_marker: bytes, server_marker: bytes | None) -> None:
        with self._lock:
            self.client_marker, self.server_marker = client_marker, server_marker

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = _connect(*self.target)
            seen = threading.Event()  # the client sent the marker on this connection
            threading.Thread(target=self._up, args=(client, server, seen), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, seen), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, seen: threading.Event) -> None:
        while data := _recv(client):
            marker = self.client_marker
            if marker is not None and marker in data:
                if self._cut_before_server():
                    break
                seen.set()
            if not _send(server, data):
                break
        _close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, seen: threading.Event) -> None:
        while data := _recv(server):
            if seen.is_set() and self._cut_now(data):
                break
            if not _send(client, data):
                break
        _close(client, server)

    def _cut_before_server(self) -> bool:
        with self._lock:
            if self.client_marker is None or self.server_marker is not None:
                return False
            self.client_marker = None
            self.cuts += 1
            return True

    def _cut_now(self, data: bytes) -> bool:
        with self._lock:
            if self.server_marker is None or self.server_marker not in data:
                return False
            self.client_marker = self.server_marker = None
            self.cuts += 1
            return True

    def close(self) -> None:
        self.listener.close()


@contextlib.contextmanager
def cutting_proxy(url: str) -> Iterator[tuple[CuttingProxy, str]]:
    """A ``CuttingProxy`` in front of ``url``'s server, and ``url`` through it; closed afterwards."""
    parts = urlsplit(url)
    socket_dir = parse_qs(parts.query).get("host", [""])[0]  # the embedded server: a Unix socket only
    proxy = CuttingProxy(socket_dir or parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        netloc = f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}"
        yield proxy, urlunsplit(parts._replace(netloc=netloc, query=""))
    finally:
        proxy.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _connect(host: str, port: int) -> socket.socket:
    """A TCP connection, or a Unix-socket one when ``host`` is a directory (PostgreSQL's socket naming)."""
    if host.startswith("/"):
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.connect(f"{host}/.s.PGSQL.{port}")
        return unix
    return socket.create_connection((host, port))
