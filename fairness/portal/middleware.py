"""Requests whose URL carries a NUL character are refused at the door.

PostgreSQL text cannot hold NUL, so a `%00` in a path or query string would reach the database
driver and come back as a server error instead of a clear 400. Form fields (Django's own NUL
validator) and the admin API's request bodies (its schemas) are checked where they are parsed.
"""

from __future__ import annotations

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.decorators import sync_and_async_middleware

MESSAGE = "The URL contains a NUL character."


def _refusal(request: HttpRequest) -> HttpResponse | None:
    if "\x00" not in request.path and "%00" not in request.META.get("QUERY_STRING", ""):
        return None
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": MESSAGE}, status=400)
    return HttpResponseBadRequest(MESSAGE)


@sync_and_async_middleware
def refuse_nul(get_response: Callable) -> Callable:
    if iscoroutinefunction(get_response):
        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or await get_response(request)
        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _refusal(request) or get_response(request)
    return middleware
