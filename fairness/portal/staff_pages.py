"""Staff pages: keys, tiers, alerts, the audit log (users, replicas and the staff home have
modules of their own).

Every change goes through fairness.portal.actions, which writes the audit log; these views only
check access, gather a form and render. A key's secret is rendered into exactly one response
(issue or rotate) and goes nowhere else: not a URL, a redirect, the session, a message or a log.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_POST, require_safe

from fairness.models import ApiKey, AuditEntry, SaturationAlert, Tier
from fairness.portal import actions, submit_once
from fairness.portal.client_address import client_address
from fairness.portal.forms import IssueKeyForm, RotateKeyForm, TierForm
from fairness.portal.front_end_forms import FrontEndForm
from fairness.portal.front_end_keys import KINDS
from fairness.portal.queries import (
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
from fairness.portal.tier_policy import in_words

if TYPE_CHECKING:
    from django.contrib.auth.models import User

AUDIT_PAGE_SIZE = 100
KEYS_PAGE_SIZE = 50


def staff_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous visitors go to sign in; signed-in non-staff get a plain 403 (not another
    sign-in form, which would suggest their account might work with a second try)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (request.user.is_active and request.user.is_staff):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapped


def _actor(request: SignedInRequest) -> actions.Actor:
    return actions.Actor(request.user, client_address(request))


def _staff_only(user: User) -> None:
    # Behind staff_required already; repeated here so a helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404


def _get_key_for_user(user: User, prefix: str) -> ApiKey:
    _staff_only(user)
    return get_object_or_404(ApiKey.objects.select_related("owner", "tier"), prefix=prefix)


def _get_tier_for_user(user: User, name: str) -> Tier:
    _staff_only(user)
    return get_object_or_404(Tier, name=name)


def _get_alert_for_user(user: User, alert_id: int) -> SaturationAlert:
    _staff_only(user)
    return get_object_or_404(SaturationAlert, pk=alert_id)


@sensitive_variables("context")
def secret_page(request: HttpRequest, template: str, **context: object) -> HttpResponse:
    """The one page that shows a secret: never cached by a browser or a proxy."""
    response = render(request, template, context)
    add_never_cache_headers(response)
    return response


def already_done(request: HttpRequest, made: str, what: str, lost_secret: str, listing: str) -> HttpResponse:
    """A form sent again (a reload of the secret page, a double click): nothing new is made."""
    if made:
        messages.info(request, f"That form was already sent and made {what} {made}…; nothing new was issued. "
                               f"Its secret was shown once: if it was not copied, {lost_secret}.")
    else:
        messages.info(request, "That form is already being handled; nothing new was issued.")
    return redirect(listing)


def _secret_page(request: HttpRequest, key: ApiKey, secret: str, rotated: ApiKey | None = None) -> HttpResponse:
    return secret_page(request, "staff/key_secret.html", key=key, secret=secret, rotated=rotated)


def _already_done(request: HttpRequest, made: str) -> HttpResponse:
    return already_done(request, made, "key", "rotate the key", "staff-keys")


# -- keys ---------------------------------------------------------------------------------------

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
    form = IssueKeyForm(request.POST or None, initial={"owner": request.GET.get("owner")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            with submit_once.first_submission(data["once"]) as record:
                key, secret = actions.issue(_actor(request), data["owner"], data["tier"], data["label"],
                                            form.expires_at(), data.get("membership"), data["front_end"])
                record(key.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        return _secret_page(request, key, secret)
    return render(request, "staff/key_issue.html", {"form": form})


@staff_required
def revoke_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:  # a second click, or a stale tab: nothing to do, nothing to audit
        messages.info(request, f"{key.prefix}… was already revoked.")
        return redirect("staff-keys")
    if request.method == "POST":
        actions.revoke(_actor(request), key)
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
        actions.set_front_end(_actor(request), key, front_end)
        said = f"speaks for {KINDS[front_end.kind]}" if front_end.kind else "speaks for its owner only"
        messages.success(request, f"Saved: {key.prefix}… {said}. Every gateway follows within a second.")
        return redirect("staff-keys")
    return render(request, "staff/key_front_end.html", {"key": key, "form": form})


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
                new, secret = actions.rotate(_actor(request), key, form.cleaned_data["grace_seconds"])
                record(new.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        except AlreadyRotated:
            return _already_rotated(request, key)
        key.refresh_from_db()
        return _secret_page(request, new, secret, rotated=key)
    return render(request, "staff/key_rotate.html", {"key": key, "form": form})


# -- tiers --------------------------------------------------------------------------------------

@staff_required
@require_safe
def tiers(request: SignedInRequest) -> HttpResponse:
    rows = Tier.objects.annotate(live_keys=Count("api_keys", filter=Q(api_keys__revoked_at=None)))
    return render(request, "staff/tiers.html", {"tiers": [(tier, in_words(tier)) for tier in rows]})


@staff_required
def edit_tier(request: SignedInRequest, name: str | None = None) -> HttpResponse:
    """Creates a tier without a name, edits the named one; new requests follow at once."""
    tier = _get_tier_for_user(request.user, name) if name else Tier()
    form = TierForm(request.POST or None, instance=tier)
    if request.method == "POST" and form.is_valid():
        creating = tier.pk is None
        actions.save_tier(_actor(request), form.instance, form.changes())
        messages.success(request, f"{'Created' if creating else 'Saved'} tier {form.instance}.")
        return redirect("staff-tiers")
    return render(request, "staff/tier_form.html", {"form": form, "tier": tier})


# -- alerts and audit ---------------------------------------------------------------------------

@staff_required
@require_safe
def alerts(request: SignedInRequest) -> HttpResponse:
    return render(request, "staff/alerts.html", {
        "alerts": SaturationAlert.objects.select_related("acknowledged_by")[:200],
    })


@staff_required
@require_POST
def acknowledge_alert(request: SignedInRequest, alert_id: int) -> HttpResponse:
    alert = _get_alert_for_user(request.user, alert_id)
    if not alert.is_open:  # a stale tab: nobody needs to be on it any more
        messages.info(request, f"Resolved already, nothing to acknowledge: {alert}.")
        return redirect("staff-alerts")
    actions.acknowledge(_actor(request), alert)
    messages.success(request, f"Acknowledged: {alert}.")
    return redirect("staff-alerts")


@staff_required
@require_safe
def audit(request: SignedInRequest) -> HttpResponse:
    page = Paginator(AuditEntry.objects.all(), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "staff/audit.html", {"page": page})
