"""The two pages of an SSO sign-in: the start (a redirect to the provider) and the callback,
mozilla-django-oidc's views with our discovery and a page that says what went wrong instead of
the library's bare redirect."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from fairness.portal.signin.oidc_backend import SignInProblem, SignInRefused, discover

log = logging.getLogger(__name__)


def refused_page(request: HttpRequest, problem: SignInProblem) -> HttpResponse:
    return render(request, "registration/sso_refused.html",
                  {"title": problem.title, "message": problem.message,
                   "local_signin": settings.GP_LOCAL_SIGNIN}, status=problem.status)


def _require_sso() -> None:
    if not settings.GP_OIDC_ISSUER:
        raise Http404("Sign-in with the institution's account is not set up here.")


class SsoStart(OIDCAuthenticationRequestView):  # type: ignore[misc]  # untyped library
    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # not the library's: it reads the endpoint from settings
        self.OIDC_RP_CLIENT_ID = settings.GP_OIDC_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        _require_sso()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discover().authorization_endpoint
        except SignInProblem as problem:
            return refused_page(request, problem)
        response: HttpResponse = super().get(request)
        return response


REPLAYED = ("This sign-in link was already used, or was not started in this browser. "
            "Start again from the sign-in page.")
PROVIDER_SAID_NO = ("The institution's sign-in service did not sign you in. Start again from the sign-in page; "
                    "if it happens again, the portal's staff can read the service's reason in the portal's log.")


class SsoCallback(OIDCAuthenticationCallbackView):  # type: ignore[misc]  # untyped library
    def get(self, request: HttpRequest) -> HttpResponse:
        _require_sso()
        if request.GET.get("error"):
            return self.provider_said_no(request)
        try:
            response: HttpResponse = super().get(request)
        except SignInProblem as problem:
            return refused_page(request, problem)
        except SuspiciousOperation:  # the library's word for a state this session never issued
            replayed = SignInRefused(REPLAYED)
            replayed.status = 400
            return refused_page(request, replayed)
        return response

    def provider_said_no(self, request: HttpRequest) -> HttpResponse:
        """The provider's error answer, with words of our own: the query string is anyone's to
        write (a link to it could put an attacker's text on our origin), and anyone's link must
        not sign the visitor out either (the library's does), so nobody is. Only an answer to a
        sign-in this session started (its state) counts as the provider's; it is logged."""
        state = request.GET.get("state")
        states = request.session.get("oidc_states")
        if isinstance(states, dict) and isinstance(state, str) and state in states:
            del states[state]  # a state is used once, refused or not
            request.session.modified = True
            log.warning("The OpenID provider refused a sign-in: error=%r description=%r",
                        request.GET["error"][:100], (request.GET.get("error_description") or "")[:300])
            return refused_page(request, SignInRefused(PROVIDER_SAID_NO))
        unsolicited = SignInRefused(REPLAYED)
        unsolicited.status = 400
        return refused_page(request, unsolicited)

    def login_failure(self) -> HttpResponse:
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            message = "Your account here has been deactivated by the portal's staff; ask them to reactivate it."
        else:
            message = REPLAYED
        problem = SignInRefused(message)
        if user is None:
            problem.status = 400
        return refused_page(self.request, problem)

    @property
    def success_url(self) -> str:
        next_url = self.request.session.get("oidc_login_next")
        if isinstance(next_url, str) and next_url:
            return next_url
        user = self.request.user
        return reverse("staff-home" if user.is_active and user.is_staff else "me")
