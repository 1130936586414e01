"""The listening socket, bound before the model loads: a busy or bad address fails in a moment,
and nothing can take the port between the check and uvicorn's start (uvicorn is handed the socket).
"""

from __future__ import annotations

import errno
import socket

#: pending connections the kernel queues before accept (uvicorn's default)
BACKLOG = 2048


class ListenError(ValueError):
    """The server cannot listen on the address; the message names it and the next step."""


def bind_socket(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """Resolve ``host``, then create, bind and listen on ``host:port``; returns the socket.

    Raises ``ListenError`` (a ``ValueError``: the CLI prints it as one ``hinge: error:`` line) for
    a port outside 0..65535 (0 picks a free port), a host that does not resolve, a port in use,
    a privileged port, or an address that is not this machine's.
    """
    if not 0 <= port <= 65535:
        raise ListenError(f"port {port} is outside 0-65535; pick a port such as 30000 with --port")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ListenError(f"cannot resolve host {host!r} ({reason}); pass an address such as "
                          "127.0.0.1 (this machine only) or 0.0.0.0 (every interface) with --host"
                          ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: TIME_WAIT is fine
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ListenError(_bind_message(host, port, exc)) from None
    return sock


def _bind_message(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is in use; pick another with --port or stop the process "
                "using it")
    if exc.errno == errno.EACCES:
        return (f"no permission to listen on {host}:{port} (ports below 1024 need root); pick "
                "--port 1024 or higher")
    if exc.errno == errno.EADDRNOTAVAIL:
        return (f"{host} is not an address of this machine, so nothing can listen on "
                f"{host}:{port}; use --host 127.0.0.1 (this machine only) or 0.0.0.0 (every "
                "interface)")
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --host or --port"
