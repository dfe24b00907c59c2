"""The address a request came from, for the sign-in limit and the audit log: nothing else decides it.

It is the ASGI scope's client (Django's REMOTE_ADDR), never a header. Behind a reverse proxy that
is the proxy's own address unless uvicorn is told to trust it: `--forwarded-allow-ips <proxy
address>` (or FORWARDED_ALLOW_IPS) makes uvicorn replace the client with the address the proxy
put in X-Forwarded-For, and only for connections from that proxy. Reading X-Forwarded-For here
instead would let any client name its own address: a fresh one for every failed sign-in, or
someone else's in the audit log.
"""

from __future__ import annotations

from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    return request.META.get("REMOTE_ADDR") or None
