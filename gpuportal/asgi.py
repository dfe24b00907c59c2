"""The ASGI entry point. /v1/ (the OpenAI-compatible proxy) runs without Django's middleware:
sessions, CSRF, messages and the rest serve the pages, and on every proxied request they would
only cost time. Everything else gets the full stack."""

import os

from django.core.asgi import get_asgi_application
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")

pages = get_asgi_application()


class ProxyHandler(ASGIHandler):
    """Django's ASGI handler with an empty middleware chain."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        get_response = self._get_response_async if is_async else self._get_response
        self._middleware_chain = convert_exception_to_response(get_response)


proxy = ProxyHandler()
PROXY_PREFIX = "/v1/"


async def application(scope, receive, send):
    if scope["type"] == "http" and scope["path"].startswith(PROXY_PREFIX):
        return await proxy(scope, receive, send)
    return await pages(scope, receive, send)
