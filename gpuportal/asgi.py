"""The ASGI entry point. /v1/ (the OpenAI-compatible proxy) goes straight to the proxy views
through a lean adapter (fairness/asgi.py); the pages get Django's full request cycle."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")

pages = get_asgi_application()

from fairness.gateway import asgi  # noqa: E402  (needs the apps loaded by the line above)

PROXY_PREFIX = "/v1/"


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"].startswith(PROXY_PREFIX):
        return await asgi.app(scope, receive, send)
    return await pages(scope, receive, send)
