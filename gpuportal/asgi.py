"""The ASGI entry point. /v1/ (the OpenAI-compatible proxy) goes straight to the gateway's lean
adapter (fairness/gateway/asgi.py), which also owns the lifespan; the pages get Django's full
request cycle."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")

pages = get_asgi_application()

from fairness.gateway.asgi import PREFIX, GatewayApp  # noqa: E402  (needs the apps loaded above)

gateway = GatewayApp()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await gateway.lifespan(receive, send)
    if scope["type"] == "http" and scope["path"].startswith(PREFIX):
        return await gateway(scope, receive, send)
    return await pages(scope, receive, send)
