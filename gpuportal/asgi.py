"""The ASGI entry point. /v1/ (the OpenAI-compatible proxy) goes straight to the gateway's lean
adapter (fairness/gateway/asgi.py), which also owns the lifespan, with the batch lane's routes added
(fairness/batch/routes.py); the pages get Django's full request cycle, behind a cap on the request
body's size (fairness/portal/body_limit.py)."""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")

django_pages = get_asgi_application()

from fairness.batch.routes import streamed_routes  # noqa: E402
from fairness.gateway import tracing  # noqa: E402
from fairness.gateway.api_paths import is_api_path  # noqa: E402
from fairness.gateway.asgi import GatewayApp  # noqa: E402  (needs the apps loaded above)
from fairness.portal.body_limit import limit_body  # noqa: E402

# Django reads (and spools to disk) a whole body before any view can refuse it: cap it first.
pages = limit_body(django_pages, settings.GP_MAX_PAGE_BODY_BYTES)

# The batch lane's /v1/files sits above the gateway, so its routes are added here.
gateway = GatewayApp(streamed_routes=streamed_routes())


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await gateway.lifespan(receive, send)
    if scope["type"] == "http" and is_api_path(scope["path"]):
        if tracing.ENABLED:  # off by default: this check is all it costs (docs/operations.md "Tracing")
            return await tracing.serve(gateway, scope, receive, send)
        return await gateway(scope, receive, send)
    return await pages(scope, receive, send)
