"""Staff pages for keys: the list (with its live load), issuing, revoking, rotating, and a key's
front end and limits. (Tiers, alerts and the audit log, users, replicas and the staff home have modules of
their own.)

Every change goes through fairness.actions, which writes the audit log; these views only
check access, gather a form and render. A key's secret is rendered into exactly one response
(issue or rotate) and goes nowhere else: not a URL, a redirect, the session, a message or a log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_safe

from fairness.actions.front_end_keys import KINDS
from fairness.actions.keys import issue, revoke, rotate, set_front_end, set_limits
from fairness.models import ApiKey, Tier
from fairness.portal import submit_once
from fairness.portal.forms import RotateKeyForm
from fairness.portal.front_end_forms import FrontEndForm
from fairness.portal.key_limit_forms import IssueKeyWithLimitsForm, KeyLimitsForm
from fairness.portal.pages.common import already_done, page_actor, secret_page, staff_only, staff_required
from fairness.portal.reports.queries import (
    DEFAULT_KEY_SORT,
    KEY_SORTS,
    KEY_STATES,
    key_load,
    key_rows,
    keys_matching,
    load_of,
    rotated_prefixes,
    sorted_key_rows,
    tokens_last_day,
)
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User

KEYS_PAGE_SIZE = 50


def _get_key_for_user(user: User, prefix: str) -> ApiKey:
    staff_only(user)
    return get_object_or_404(ApiKey.objects.select_related("owner", "tier"), prefix=prefix)


def _secret_page(request: HttpRequest, key: ApiKey, secret: str, rotated: ApiKey | None = None) -> HttpResponse:
    return secret_page(request, "staff/key_secret.html", key=key, secret=secret, rotated=rotated)


def _already_done(request: HttpRequest, made: str) -> HttpResponse:
    return already_done(request, made, "key", "rotate the key", "staff-keys")


def _key_listing(request: SignedInRequest) -> dict[str, object]:
    """The keys page's query string, checked: anything unknown falls back to the default."""
    search = request.GET.get("q", "").strip()[:100]
    tier = request.GET.get("tier", "")
    state = request.GET.get("state", "all" if request.GET.get("show") == "all" else "live")  # show=all: old links
    sort = request.GET.get("sort", DEFAULT_KEY_SORT)
    if state not in KEY_STATES:
        state = "live"
    if sort.lstrip("-") not in KEY_SORTS:
        sort = DEFAULT_KEY_SORT
    return {"q": search, "tier": tier, "state": state, "sort": sort}


@staff_required
@require_safe
def keys(request: SignedInRequest) -> HttpResponse:
    listing = _key_listing(request)
    now = timezone.now()
    matching = keys_matching(str(listing["q"]), str(listing["tier"]), str(listing["state"]), now)
    rows, ordered = sorted_key_rows(matching, str(listing["sort"]), now)
    page: Page[Any]
    if rows is None:  # sorted by the database: page first, then build only that page's rows
        page = Paginator(ordered, KEYS_PAGE_SIZE).get_page(request.GET.get("page"))
        rows = key_rows(page.object_list, now, key_load(), tokens_last_day())
    else:
        page = Paginator(rows, KEYS_PAGE_SIZE).get_page(request.GET.get("page"))
        rows = list(page.object_list)
    defaults = (("state", "live"), ("sort", DEFAULT_KEY_SORT))
    query = {name: value for name, value in listing.items() if value and (name, value) not in defaults}
    columns = [
        (name, title, _sort_link(query, name, str(listing["sort"])))
        for name, title in (("key", "Key"), ("owner", "Owner"), ("tier", "Tier"), ("created", "Created"),
                            ("expires", "Expires"), ("last_used", "Last used"), ("in_flight", "In flight"),
                            ("queued", "Queued"), ("tokens", "Tokens, 24 h"))
    ]
    return render(request, "staff/keys.html", {
        "page": page, "rows": rows, "now": now, "listing": listing, "tiers": Tier.objects.all(), "states": KEY_STATES,
        "columns": columns, "query": urlencode(query), "filtered": bool(query),
    })


def _sort_link(query: dict[str, object], column: str, current: str) -> tuple[str, str]:
    """(the link that sorts by `column`, its aria-sort value): a second click reverses it."""
    if current.lstrip("-") == column:
        descending = current.startswith("-")
        flipped = column if descending else f"-{column}"
        return "?" + urlencode({**query, "sort": flipped}), "descending" if descending else "ascending"
    # Dates and figures start with the latest or largest; names start with A.
    first = column if column in ("key", "owner", "tier") else f"-{column}"
    return "?" + urlencode({**query, "sort": first}), ""


@staff_required
@require_safe
def keys_load(request: SignedInRequest) -> JsonResponse:
    """In flight and queued of the keys a page shows, for its live refresh (at most a page's worth)."""
    prefixes = request.GET.getlist("prefix")[:KEYS_PAGE_SIZE]
    return JsonResponse({"keys": load_of(prefixes)})


@staff_required
@sensitive_post_parameters("jwt_secret")
@sensitive_variables("secret", "data")
def issue_key(request: SignedInRequest) -> HttpResponse:
    form = IssueKeyWithLimitsForm(request.POST or None, initial={"owner": request.GET.get("owner")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            with submit_once.first_submission(data["once"]) as record:
                key, secret = issue(page_actor(request), data["owner"], data["tier"], data["label"],
                                            form.expires_at(), data.get("membership"), data["front_end"],
                                            data["limits"])
                record(key.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        except ValidationError as refused:  # the tier changed since the form was checked
            form.add_error(None, refused)
        else:
            return _secret_page(request, key, secret)
    return render(request, "staff/key_issue.html", {"form": form})


@staff_required
def revoke_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:  # a second click, or a stale tab: nothing to do, nothing to audit
        messages.info(request, f"{key.prefix}… was already revoked.")
        return redirect("staff-keys")
    if request.method == "POST":
        revoke(page_actor(request), key)
        messages.success(request, f"Revoked {key.prefix}… of {key.owner}. Every gateway refuses it within a second.")
        return redirect("staff-keys")
    return render(request, "staff/key_revoke.html", {"key": key})


@staff_required
@sensitive_post_parameters("jwt_secret")
@sensitive_variables("form")
def front_end_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    """Whether the key is a front end's, its JWT secret and its modes; gateways follow within a second."""
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:
        messages.error(request, f"{key.prefix}… is revoked; issue a new key instead.")
        return redirect("staff-keys")
    form = FrontEndForm(request.POST or None, key=key)
    if request.method == "POST" and form.is_valid():
        front_end = form.cleaned_data["front_end"]
        set_front_end(page_actor(request), key, front_end)
        said = f"speaks for {KINDS[front_end.kind]}" if front_end.kind else "speaks for its owner only"
        messages.success(request, f"Saved: {key.prefix}… {said}. Every gateway follows within a second.")
        return redirect("staff-keys")
    return render(request, "staff/key_front_end.html", {"key": key, "form": form})


@staff_required
def limits_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    """The key's own limits and models, below its tier's; gateways follow within a second."""
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:
        messages.error(request, f"{key.prefix}… is revoked; issue a new key instead.")
        return redirect("staff-keys")
    form = KeyLimitsForm(request.POST if request.method == "POST" else None, key=key)
    if request.method == "POST" and form.is_valid():
        try:
            set_limits(page_actor(request), key, form.cleaned_data["limits"])
        except ValidationError as refused:
            form.add_error(None, refused)
        else:
            messages.success(request, f"Saved the limits of {key.prefix}…. Every gateway follows within a second.")
            return redirect("staff-keys")
    return render(request, "staff/key_limits.html", {"key": key, "form": form, "back": "staff-keys"})


class AlreadyRotated(Exception):
    pass


def _in_grace(key: ApiKey) -> bool:
    """Rotated with a grace period that has not ended: its successor exists already, and a
    second rotation would make two new secrets for one old one."""
    return not key.is_expired() and rotated_prefixes().filter(target=key.prefix).exists()


def _already_rotated(request: HttpRequest, key: ApiKey) -> HttpResponse:
    messages.info(request, f"{key.prefix}… was rotated already and stops when its grace period ends; "
                           "rotate its new key instead.")
    return redirect("staff-keys")


@staff_required
@sensitive_variables("secret")
def rotate_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:
        messages.error(request, f"{key.prefix}… is revoked; issue a new key instead.")
        return redirect("staff-keys")
    form = RotateKeyForm(request.POST or None)
    if request.method != "POST" and _in_grace(key):
        return _already_rotated(request, key)
    if request.method == "POST" and form.is_valid():
        try:
            with submit_once.first_submission(form.cleaned_data["once"]) as record:
                if _in_grace(key):  # checked after the repeat check: a reload is told what it made
                    raise AlreadyRotated
                new, secret = rotate(page_actor(request), key, form.cleaned_data["grace_seconds"])
                record(new.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        except AlreadyRotated:
            return _already_rotated(request, key)
        key.refresh_from_db()
        return _secret_page(request, new, secret, rotated=key)
    return render(request, "staff/key_rotate.html", {"key": key, "form": form})
