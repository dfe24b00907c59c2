"""/me/playground/: a signed-in person chats with a model they may use, from the page's script,
through /v1/ as any client does (the pages and /v1/ are one origin: gpuportal/asgi.py), so the
request is queued, charged and recorded like every other.

The script asks `playground_key` (a same-origin POST with the CSRF token, never cached) for this
session's key (fairness.actions.playground) and keeps it in a variable: the secret is in no
page's HTML, no URL and no browser storage, and stops working when the session ends.
"""

from __future__ import annotations

import datetime as dt
from typing import TypedDict

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_variables
from django.views.decorators.http import require_POST

from fairness.actions import playground as playground_keys
from fairness.gateway.errors import ApiError
from fairness.portal.pages.common import page_actor
from fairness.portal.signed_in import SignedInRequest


class KeyAnswer(TypedDict):
    key: str  # the secret, for the script's Authorization header
    prefix: str
    tier: str
    expires_at: str


def _session_expiry(request: HttpRequest) -> dt.datetime:
    """When the session ends. Pinned to a date on first use, so that the key can end with it: an
    unpinned session's end is "its age (or the seconds set) after its last save", which the next
    save moves on. A session meant to end with the browser is left as it is (pinning would make
    its cookie outlive it); the store still ends it at the age, and the key with it."""
    session = request.session
    pinned = isinstance(session.get("_session_expiry"), str)  # set_expiry(datetime) keeps it as text
    if not pinned and not session.get_expire_at_browser_close():
        session.set_expiry(session.get_expiry_date())
    return session.get_expiry_date()


@login_required
def playground(request: SignedInRequest) -> HttpResponse:
    reason = playground_keys.refusal(request.user, request.session.session_key or "", timezone.now())
    return render(request, "me/playground.html", {"reason": reason})


@require_POST
@sensitive_variables("secret")
def playground_key(request: HttpRequest) -> HttpResponse:
    """This session's key, as JSON (KeyAnswer); errors in the
    OpenAI shape (401 signed out, 403 refused), which the script shows as they are."""
    if not request.user.is_authenticated:
        return ApiError(401, "Sign in to use the playground.", "not_signed_in").response()
    try:
        key, secret = playground_keys.key_for_session(page_actor(request),  # type: ignore[arg-type]
                                                      request.session.session_key or "", _session_expiry(request),
                                                      earlier=request.session.get(playground_keys.SESSION_FIELD, ""))
    except playground_keys.Refused as refused:
        return ApiError(403, str(refused), "playground_refused").response()
    request.session[playground_keys.SESSION_FIELD] = key.prefix
    assert key.expires_at is not None  # a session's key always ends
    answer: KeyAnswer = {"key": secret, "prefix": key.prefix, "tier": key.tier.name,
                         "expires_at": key.expires_at.isoformat()}
    response = JsonResponse(answer)
    add_never_cache_headers(response)
    return response
