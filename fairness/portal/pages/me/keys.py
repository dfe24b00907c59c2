"""A researcher's own keys, /me/keys/: list, make, narrow, rotate and revoke them.

The rules (which tier, how many, how long) are fairness.actions.self_service's; these views check
that a key is the signed-in person's own (anyone else's is a 404, so prefixes do not leak),
gather a form and render. As on the staff pages, a secret is rendered into exactly one response,
never cached (pages/common.py: secret_page), and goes nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from fairness.actions import self_service
from fairness.models import ApiKey
from fairness.portal import submit_once
from fairness.portal.forms import RotateKeyForm
from fairness.portal.key_limit_forms import KeyLimitsForm, OwnKeyWithLimitsForm
from fairness.portal.pages.common import already_done, page_actor, secret_page
from fairness.portal.reports.queries import KEY_RELATIONS, key_load, key_rows, rotated_prefixes, tokens_last_day
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _get_keys_for_user(user: User) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(owner=user).select_related(*KEY_RELATIONS)


def _get_key_for_user(user: User, prefix: str) -> ApiKey:
    """Only the user's own key; anyone else's is not found, exactly like one that does not exist."""
    return get_object_or_404(_get_keys_for_user(user), prefix=prefix)


def _in_grace(key: ApiKey) -> bool:
    """Rotated with a grace that has not ended: its successor exists already."""
    return not key.is_expired() and rotated_prefixes().filter(target=key.prefix).exists()


def _secret_page(request: HttpRequest, key: ApiKey, secret: str, rotated: ApiKey | None = None) -> HttpResponse:
    return secret_page(request, "staff/key_secret.html", key=key, secret=secret, rotated=rotated,
                       back=reverse("me-keys"), back_text="Back to my keys")


def _already_done(request: HttpRequest, made: str) -> HttpResponse:
    return already_done(request, made, "key", "rotate the key", "me-keys")


@login_required
@sensitive_variables("secret")
def keys(request: SignedInRequest) -> HttpResponse:
    """The list, and the form that makes a key (or why they cannot)."""
    now = timezone.now()
    tier = self_service.own_tier(request.user, now)
    reason = self_service.refusal(request.user, tier, now)
    form = None if tier is None or reason else OwnKeyWithLimitsForm(request.POST or None, user=request.user, tier=tier)
    status = 200
    if request.method == "POST":
        if form is None:
            status = 403
        elif form.is_valid():
            data = form.cleaned_data
            try:
                with submit_once.first_submission(data["once"]) as record:
                    key, secret = self_service.issue_own(page_actor(request), data["label"], data.get("expires_days"),
                                                         data.get("account"), limits=data["limits"])
                    record(key.prefix)
            except submit_once.Repeated as repeated:
                return _already_done(request, repeated.outcome)
            except self_service.Refused as refused:
                form.add_error(None, str(refused))
            except ValidationError as refused:  # the tier changed since the form was checked
                form.add_error(None, refused)
            else:
                return _secret_page(request, key, secret)
    rows = key_rows(_get_keys_for_user(request.user), now, key_load(), tokens_last_day())
    rotatable = {key.prefix for key in _get_keys_for_user(request.user) if not self_service.rotate_refusal(key)}
    limitable = {key.prefix for key in _get_keys_for_user(request.user) if not self_service.limits_refusal(key)}
    return render(request, "me/keys.html", {
        "rows": [(row, row.key.prefix in rotatable) for row in rows], "limitable": limitable,
        "form": form, "reason": reason, "tier": tier, "max_keys": self_service.max_keys(),
        "live": self_service.live_keys(request.user, now).count(),
    }, status=status)


@login_required
@sensitive_variables("secret")
def rotate_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    key = _get_key_for_user(request.user, prefix)
    reason = self_service.rotate_refusal(key)
    if not reason and (key.revoked_at is not None or key.is_expired()):
        reason = f"{key.prefix}… no longer works: make a new key instead."
    if not reason and request.method != "POST" and _in_grace(key):
        reason = f"{key.prefix}… was rotated already and stops when its grace ends; rotate its new key instead."
    if reason:
        messages.error(request, reason)
        return redirect("me-keys")
    form = RotateKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            with submit_once.first_submission(form.cleaned_data["once"]) as record:
                if _in_grace(key):  # after the repeat check: a reload is told what it made
                    raise self_service.Refused(f"{key.prefix}… was rotated already; rotate its new key instead.")
                new, secret = self_service.rotate_own(page_actor(request), key, form.cleaned_data["grace_seconds"])
                record(new.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        except self_service.Refused as refused:
            messages.error(request, str(refused))
            return redirect("me-keys")
        key.refresh_from_db()
        return _secret_page(request, new, secret, rotated=key)
    return render(request, "me/key_rotate.html", {"key": key, "form": form})


@login_required
def limits_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    """Narrow one of their own keys below its tier (or let it back up to the tier)."""
    key = _get_key_for_user(request.user, prefix)
    reason = self_service.limits_refusal(key)
    if reason:
        messages.error(request, reason)
        return redirect("me-keys")
    form = KeyLimitsForm(request.POST if request.method == "POST" else None, key=key)
    if request.method == "POST" and form.is_valid():
        try:
            self_service.set_own_limits(page_actor(request), key, form.cleaned_data["limits"])
        except self_service.Refused as refused:
            messages.error(request, str(refused))
            return redirect("me-keys")
        except ValidationError as refused:
            form.add_error(None, refused)
        else:
            messages.success(request, f"Saved the limits of {key.prefix}…: every gateway follows within a second.")
            return redirect("me-keys")
    return render(request, "staff/key_limits.html", {"key": key, "form": form, "back": "me-keys"})


@login_required
def revoke_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:  # a second click, or a stale tab
        messages.info(request, f"{key.prefix}… was already revoked.")
        return redirect("me-keys")
    if request.method == "POST":
        self_service.revoke_own(page_actor(request), key)
        messages.success(request, f"Revoked {key.prefix}…: every gateway refuses it within a second.")
        return redirect("me-keys")
    return render(request, "me/key_revoke.html", {"key": key})
