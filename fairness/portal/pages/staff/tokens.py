"""Staff pages for admin tokens: the credentials scripts use for the admin JSON API.

A token acts as its owner with all their powers, so staff issue tokens for themselves and only a
superuser for someone else (issue_admin_token holds the rule; the form offers no more).
Like a key's, a token's secret is rendered into exactly one response and goes nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables
from django.views.decorators.http import require_safe

from fairness.actions.tokens import issue_admin_token, revoke_admin_token
from fairness.models import AdminToken
from fairness.portal import submit_once
from fairness.portal.forms import IssueAdminTokenForm
from fairness.portal.pages.common import already_done, page_actor, secret_page, staff_required
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _get_token_for_user(user: User, prefix: str) -> AdminToken:
    # Behind staff_required already; repeated so the helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404
    return get_object_or_404(AdminToken.objects.for_listing(), prefix=prefix)


def _secret_page(request: HttpRequest, token: AdminToken, secret: str) -> HttpResponse:
    return secret_page(request, "staff/token_secret.html", token=token, secret=secret)


def _already_done(request: HttpRequest, made: str) -> HttpResponse:
    return already_done(request, made, "admin token", "revoke that token and issue another", "staff-tokens")


@staff_required
@require_safe
def tokens(request: SignedInRequest) -> HttpResponse:
    return render(request, "staff/tokens.html", {"tokens": AdminToken.objects.for_listing(), "now": timezone.now()})


@staff_required
@sensitive_variables("secret")
def issue_token(request: SignedInRequest) -> HttpResponse:
    form = IssueAdminTokenForm(request.POST or None, issuer=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            with submit_once.first_submission(data["once"]) as record:
                token, secret = issue_admin_token(page_actor(request), data["owner"], data["label"],
                                                          form.expires_at())
                record(token.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        except ValidationError as exc:  # the owner stopped being staff since the form was shown
            form.add_error("owner", exc)
        else:
            return _secret_page(request, token, secret)
    return render(request, "staff/token_issue.html", {"form": form})


@staff_required
def revoke_token(request: SignedInRequest, prefix: str) -> HttpResponse:
    token = _get_token_for_user(request.user, prefix)
    if token.revoked_at is not None:  # a second click, or a stale tab: nothing to do, nothing to audit
        messages.info(request, f"{token.prefix}… was already revoked.")
        return redirect("staff-tokens")
    if request.method == "POST":
        revoke_admin_token(page_actor(request), token)
        messages.success(request, f"Revoked admin token {token.prefix}… of {token.owner}. Its next request is refused.")
        return redirect("staff-tokens")
    return render(request, "staff/token_revoke.html", {"token": token})
