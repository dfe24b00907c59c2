"""Sign-in with a limit on attempts, per address and per username, for /accounts/login/ and
/admin/login/ alike (one set of counters: the admin's form is no way around the portal's limit).

Why our own limiter and not django-axes, the usual choice: measured on django-axes 8.3.1, its
backend checks the failure count (`is_allowed`: failures >= limit) before the password and adds
to it only afterwards, in its `user_login_failed` handler. Attempts sent at once all read the
same count below the limit, so every one of them reaches the password check: a burst of 60
guesses is not held to 5. (With django-ipware installed it also takes the address from
X-Forwarded-For by default, which any client can write.) Here every attempt is counted first,
with one atomic INCR per counter in a single MULTI, and refused when its count exceeds the limit:
of N attempts at once, at most the limit reach the password check. A success gives its attempt
back (signin_succeeded.lua), so only failures add up.

Usernames are counted by their NFKC + casefold form: Django's form signs `𝐚𝐥𝐢𝐜𝐞` in as `alice`
(NFKC), so a raw key would give every look-alike spelling a fresh allowance. Addresses are
client_address()'s: the proxy-forwarded one only when uvicorn trusts the proxy, never a header.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _

from fairness.portal.client_address import client_address
from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync

if TYPE_CHECKING:
    from django.contrib.auth.models import User

_SUCCEEDED = (Path(__file__).with_name("signin_succeeded.lua")).read_text()
# Longer than any username (150): a longer name cannot sign in, its counter only needs a bound.
_USERNAME_KEY_CHARS = 200


def normalised_username(raw: str) -> str:
    """One counter for every spelling that names the same account, and for case variants."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", raw).casefold())
    return folded.strip()[:_USERNAME_KEY_CHARS]


@dataclass(frozen=True)
class Attempt:
    address: str
    username: str
    allowed: bool
    retry_after: int  # seconds until the exceeded counter expires; 0 when allowed

    def counters(self) -> list[str]:
        names = [keyspace.signin_attempts_by_address(self.address)]
        if self.username:  # an empty name cannot sign in: the address alone counts it
            names.append(keyspace.signin_attempts_by_username(self.username))
        return names


def count_attempt(address: str | None, raw_username: str) -> Attempt:
    """Counts one attempt against its address and username, before any password is checked."""
    limit = settings.GP_SIGNIN_FAILURES_ALLOWED
    attempt = Attempt(address or "unknown", normalised_username(raw_username), allowed=True, retry_after=0)
    with redis_sync().pipeline(transaction=True) as pipe:
        for key in attempt.counters():
            pipe.set(key, 0, ex=settings.GP_SIGNIN_LOCKOUT_SECONDS, nx=True)  # the window starts here
            pipe.incr(key)
            pipe.ttl(key)
        replies = pipe.execute()
    exceeded = [max(ttl, 1) for count, ttl in zip(replies[1::3], replies[2::3], strict=True) if count > limit]
    if exceeded:
        return Attempt(attempt.address, attempt.username, allowed=False, retry_after=max(exceeded))
    return attempt


def attempt_succeeded(attempt: Attempt) -> None:
    script = redis_sync().register_script(_SUCCEEDED)
    script(keys=attempt.counters())


def _too_many(request: HttpRequest, retry_after: int) -> HttpResponse:
    minutes = math.ceil(retry_after / 60)
    response = render(request, "registration/too_many.html", {"minutes": minutes}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


class LocalSignInForm(AuthenticationForm):
    """The password form; with GP_LOCAL_SIGNIN=staff, local passwords are for staff only
    (researchers use SSO, or their directory password: the LDAP backend's users pass). A right
    local password of a non-staff user is refused like a wrong one, and counts as one."""

    def confirm_login_allowed(self, user: User) -> None:
        super().confirm_login_allowed(user)
        from_directory = getattr(user, "backend", "") == "fairness.portal.signin.ldap_backend.DirectoryBackend"
        if settings.GP_LOCAL_SIGNIN == "staff" and not user.is_staff and not from_directory:
            raise ValidationError("Sign in with your institution's account: passwords are for staff only here.",
                                  code="staff_only")


class SignInView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True
    authentication_form: type[AuthenticationForm] = LocalSignInForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(sso=bool(settings.GP_OIDC_ISSUER), local_signin=settings.GP_LOCAL_SIGNIN,
                       directory=bool(settings.GP_LDAP_SERVER_URI))
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.attempt = count_attempt(client_address(request), request.POST.get("username") or "")
        if not self.attempt.allowed:
            return _too_many(request, self.attempt.retry_after)
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        attempt_succeeded(self.attempt)
        return super().form_valid(form)

    def get_default_redirect_url(self) -> str:
        """Without a `next`: staff to the staff home, everyone else to their own page."""
        user = self.request.user
        return reverse("staff-home" if user.is_active and user.is_staff else "me")


class AdminSignInView(SignInView):
    """/admin/login/, routed here ahead of the admin's own: its page and form (staff only), the
    portal's counters. Mirrors AdminSite.login."""

    template_name = "admin/login.html"
    authentication_form = AdminAuthenticationForm
    # A signed-in non-staff member sent here by the admin must see the form, not bounce back.
    redirect_authenticated_user = False

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "GET" and admin.site.has_permission(request):
            return HttpResponseRedirect(reverse("admin:index", current_app=admin.site.name))
        request.current_app = admin.site.name
        return super().dispatch(request, *args, **kwargs)

    def get_default_redirect_url(self) -> str:
        return reverse("admin:index", current_app=admin.site.name)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        request = self.request
        context.update(admin.site.each_context(request), title=_("Log in"), subtitle=None,
                       app_path=request.get_full_path(), username=request.user.get_username())
        if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
            context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=admin.site.name)
        return context
