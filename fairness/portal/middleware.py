"""Middleware of the pages: a Content-Security-Policy on every response, requests whose URL
carries a NUL character refused at the door, and a clear 503 while the database is away.

Django 5.2 has no CSP of its own (6.0 adds one); ours is one fixed header, so this is a few lines
rather than the django-csp package, whose nonces and per-view policies nothing here needs.

PostgreSQL text cannot hold NUL, so a `%00` in a path or query string would reach the database
driver and come back as a server error instead of a clear 400. Form fields (Django's own NUL
validator) and the admin API's request bodies (its schemas) are checked where they are parsed.

A page needs the database (the session, the signed-in person, the rows it shows): while it is
away, a view's OperationalError or InterfaceError becomes a 503 page (templates/503.html), or for
/api/ the OpenAI-shaped JSON the gateway answers, with Retry-After; never a 500 with a traceback.
The API's /v1/ does not pass here (gateway/asgi.py answers it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.template.loader import render_to_string
from django.utils.decorators import sync_and_async_middleware
from django.utils.deprecation import MiddlewareMixin

from fairness.gateway import database_outage

MESSAGE = "The URL contains a NUL character."


def _refusal(request: HttpRequest) -> HttpResponse | None:
    if "\x00" not in request.path and "%00" not in request.META.get("QUERY_STRING", ""):
        return None
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": MESSAGE}, status=400)
    return HttpResponseBadRequest(MESSAGE)


@sync_and_async_middleware
def refuse_nul(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    if iscoroutinefunction(get_response):
        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or await get_response(request)
        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _refusal(request) or get_response(request)
    return middleware


def _with_policy(response: HttpResponse) -> HttpResponse:
    policy = settings.GP_CONTENT_SECURITY_POLICY
    if policy and "Content-Security-Policy" not in response:
        response["Content-Security-Policy"] = policy
    return response


@sync_and_async_middleware
def content_security_policy(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """GP_CONTENT_SECURITY_POLICY on every response that does not set its own."""
    if iscoroutinefunction(get_response):
        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return _with_policy(await get_response(request))
        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _with_policy(get_response(request))
    return middleware


class DatabaseUnavailable(MiddlewareMixin):
    """The 503 for a request the database's absence failed (raised in the view, or while its
    template renders)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, database_outage.DATABASE_ERRORS):
            return None
        database_outage.OUTAGE_LOG.report(exception, f"{request.method} {request.path}")
        if request.path.startswith("/api/"):
            response: HttpResponse = database_outage.unavailable().response()
        else:
            # Without the request: its context processors would ask the database for the session,
            # the person and their messages all over again.
            response = HttpResponse(render_to_string("503.html"), status=503)
            response["Retry-After"] = str(database_outage.RETRY_AFTER_SECONDS)
        # Logged once above, as a warning: not again by Django's request log, as an error.
        response._has_been_logged = True  # type: ignore[attr-defined]
        return response
