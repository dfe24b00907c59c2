"""The test process talks to this machine only: a connection to an address outside loopback
(127.0.0.0/8, ::1) is refused before it is made, and fails the test that tried it.

`install()` patches, once per process, every door out: `socket.socket.connect` / `connect_ex` /
`sendto` (what blocking clients, asyncio's selector loop and ssl sockets all end in), asyncio's
`sock_connect` and `create_connection` (checked before they resolve anything), and
`socket.getaddrinfo`, whose host must be an address, `localhost` or a `.invalid` name (which fails
at once, as RFC 6761 says it must, with no DNS query) and whose answers must be loopback. Anything
else raises `OutsideLoopback` without calling the real function, so no packet leaves; and as code
under test may swallow that error (a health probe that marks the engine down), each refusal is
also kept, for the autouse fixture in conftest.py to fail the test with.

Processes the tests start (gateways, workers, engines) are not patched: what keeps them on
loopback is that every address a test gives them is one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

ALLOWED_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


class OutsideLoopback(PermissionError):
    """A test tried to reach an address outside this machine. (An OSError, so clients clean up as
    after any refused connection; the test fails all the same.)"""


_refused: list[str] = []
_lock = threading.Lock()
_real: dict[str, Callable[..., Any]] = {}


def refused() -> list[str]:
    """What was refused since the last call, and forget it."""
    with _lock:
        taken = list(_refused)
        _refused.clear()
        return taken


def fail_if_refused() -> None:
    """Fail the running test if anything was refused since the last check."""
    taken = refused()
    if taken:
        pytest.fail("reached past loopback: " + "; ".join(taken), pytrace=False)


def _refuse(what: str) -> OutsideLoopback:
    with _lock:
        _refused.append(what)
    return OutsideLoopback(f"the tests reach only loopback addresses (127.0.0.0/8, ::1), not {what}")


def _loopback_literal(host: str) -> bool | None:
    """Whether an address literal is this machine's (loopback, or 0.0.0.0 / :: that reach it too);
    None for a name."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 scope id is not part of it
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _normal(host: Any) -> str:
    return (host.decode("idna") if isinstance(host, bytes) else str(host)).lower()


def check_host(host: Any, what: str) -> None:
    """Raise unless `host` is a loopback address or a name that may be looked up here: a `.invalid`
    name fails at once, as it would after a DNS query (socket.gaierror, and no refusal kept)."""
    if host is None or host in ("", b""):  # a passive (listening) lookup, or the local host
        return
    name = _normal(host)
    literal = _loopback_literal(name)
    if literal is None:
        if name.rstrip(".").endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if name in ALLOWED_NAMES or name.rstrip(".").endswith(".localhost"):
            return
        raise _refuse(f"{what} {name!r}")
    if not literal:
        raise _refuse(f"{what} {name}")


def check_address(family: int, address: Any, what: str) -> None:
    if family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and address:
        check_host(address[0], what)


def _connect(self: socket.socket, address: Any) -> None:
    check_address(self.family, address, "a connection to")
    return _real["connect"](self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    check_address(self.family, address, "a connection to")
    return _real["connect_ex"](self, address)


def _sendto(self: socket.socket, data: Any, *args: Any) -> int:
    check_address(self.family, args[-1], "a datagram to")
    return _real["sendto"](self, data, *args)


def _getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
    check_host(host, "a lookup of")
    answers = _real["getaddrinfo"](host, port, *args, **kwargs)
    for family, _type, _proto, _name, address in answers:
        check_address(family, address, f"{_normal(host)!r}, which resolves to")
    return answers


async def _sock_connect(self: asyncio.AbstractEventLoop, sock: socket.socket, address: Any) -> None:
    check_address(sock.family, address, "a connection to")
    return await _real["sock_connect"](self, sock, address)


async def _create_connection(self: asyncio.AbstractEventLoop, protocol_factory: Any, host: Any = None,
                             port: Any = None, **kwargs: Any) -> Any:
    check_host(host, "a connection to")
    return await _real["create_connection"](self, protocol_factory, host, port, **kwargs)


def install() -> None:
    """Patch the doors out (idempotent)."""
    if _real:
        return
    loop_class = asyncio.BaseEventLoop
    _real.update(
        connect=socket.socket.connect, connect_ex=socket.socket.connect_ex, sendto=socket.socket.sendto,
        getaddrinfo=socket.getaddrinfo, sock_connect=loop_class.sock_connect,
        create_connection=loop_class.create_connection,
    )
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    socket.socket.sendto = _sendto  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = _getaddrinfo
    loop_class.sock_connect = _sock_connect  # type: ignore[method-assign,assignment]
    loop_class.create_connection = _create_connection  # type: ignore[method-assign,assignment]
