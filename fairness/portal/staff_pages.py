"""Staff pages: keys, users, tiers, replicas, alerts, the audit log.

Every change goes through fairness.operations, which writes the audit log; these views only
check access, gather a form and render. A key's secret is rendered into exactly one response
(issue or rotate) and goes nowhere else: not a URL, a redirect, the session, a message or a log.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_POST, require_safe

from fairness.models import ApiKey, AuditEntry, Replica, SaturationAlert, Tier
from fairness.portal import actions, submit_once
from fairness.portal.client_address import client_address
from fairness.portal.forms import (
    CreateUserForm,
    IssueKeyForm,
    ReplicaForm,
    RotateKeyForm,
    TierForm,
    UserTierForm,
)
from fairness.portal.queries import key_load, key_out, tokens_last_day
from fairness.portal.signed_in import SignedInRequest
from fairness.telemetry import polling

if TYPE_CHECKING:
    from django.contrib.auth.models import User

REPLICA_STATES = ("enable", "disable", "drain")
AUDIT_PAGE_SIZE = 100


def staff_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Anonymous visitors go to sign in; signed-in non-staff get a plain 403 (not another
    sign-in form, which would suggest their account might work with a second try)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
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


def _get_member_for_user(user: User, username: str) -> User:
    _staff_only(user)
    return get_object_or_404(get_user_model(), username=username)


def _get_tier_for_user(user: User, name: str) -> Tier:
    _staff_only(user)
    return get_object_or_404(Tier, name=name)


def _get_replica_for_user(user: User, name: str) -> Replica:
    _staff_only(user)
    return get_object_or_404(Replica, name=name)


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

@staff_required
@require_safe
def keys(request: SignedInRequest) -> HttpResponse:
    show_all = request.GET.get("show") == "all"
    queryset = ApiKey.objects.select_related("owner", "tier")
    if not show_all:
        queryset = queryset.filter(revoked_at=None).filter(Q(expires_at=None) | Q(expires_at__gt=timezone.now()))
    load, tokens = key_load(), tokens_last_day()
    rows = [key_out(key, load, tokens) for key in queryset]
    return render(request, "staff/keys.html", {"rows": rows, "show_all": show_all, "now": timezone.now()})


@staff_required
@sensitive_variables("secret")
def issue_key(request: SignedInRequest) -> HttpResponse:
    form = IssueKeyForm(request.POST or None, initial={"owner": request.GET.get("owner")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            with submit_once.first_submission(data["once"]) as record:
                key, secret = actions.issue(_actor(request), data["owner"], data["tier"], data["label"],
                                               form.expires_at())
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
@sensitive_variables("secret")
def rotate_key(request: SignedInRequest, prefix: str) -> HttpResponse:
    key = _get_key_for_user(request.user, prefix)
    if key.revoked_at is not None:
        messages.error(request, f"{key.prefix}… is revoked; issue a new key instead.")
        return redirect("staff-keys")
    form = RotateKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            with submit_once.first_submission(form.cleaned_data["once"]) as record:
                new, secret = actions.rotate(_actor(request), key, form.cleaned_data["grace_seconds"])
                record(new.prefix)
        except submit_once.Repeated as repeated:
            return _already_done(request, repeated.outcome)
        key.refresh_from_db()
        return _secret_page(request, new, secret, rotated=key)
    return render(request, "staff/key_rotate.html", {"key": key, "form": form})


# -- users --------------------------------------------------------------------------------------

@staff_required
@require_safe
def users(request: SignedInRequest) -> HttpResponse:
    people = get_user_model().objects.order_by("username").annotate(
        live_keys=Count("api_keys", filter=Q(api_keys__revoked_at=None))
    )
    tiers_of: dict[int, set[str]] = {}
    for owner_id, tier_name in ApiKey.objects.filter(revoked_at=None).values_list("owner_id", "tier__name"):
        tiers_of.setdefault(owner_id, set()).add(tier_name)
    rows = [(person, sorted(tiers_of.get(person.pk, ()))) for person in people]
    return render(request, "staff/users.html", {"rows": rows, "tiers": Tier.objects.all()})


@staff_required
@sensitive_post_parameters("password1", "password2")
def create_user(request: SignedInRequest) -> HttpResponse:
    form = CreateUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        person = actions.create_user(
            _actor(request), data["username"], data["email"], data["is_staff"], form.password()
        )
        if person.has_usable_password():
            messages.success(request, f"Created {person}.")
            return redirect("staff-users")
        if actions.password_refusal(request.user, person):  # staff: a superuser sets theirs
            messages.success(request, f"Created {person}. A superuser must set their password.")
            return redirect("staff-users")
        messages.success(request, f"Created {person}. Set a password so they can sign in.")
        return redirect("staff-user-password", username=person.get_username())
    return render(request, "staff/user_create.html", {"form": form})


@staff_required
@sensitive_post_parameters("new_password1", "new_password2")
def set_user_password(request: SignedInRequest, username: str) -> HttpResponse:
    """A first password for a researcher; anything more is a superuser's (actions.password_refusal)."""
    person = _get_member_for_user(request.user, username)
    reason = actions.password_refusal(request.user, person)
    try:
        if reason and request.method == "POST":
            actions.refuse_password(_actor(request), person, reason)  # a refused attempt is audited
        if reason:
            raise PermissionDenied(reason)
        form = SetPasswordForm(person, request.POST or None)
        if request.method == "POST" and form.is_valid():
            actions.set_password(_actor(request), person, form.cleaned_data["new_password1"])  # checks again
            messages.success(request, f"Set the password of {person}.")
            return redirect("staff-users")
    except PermissionDenied as refused:
        return render(request, "staff/user_password_refused.html", {"person": person, "reason": str(refused)},
                      status=403)
    return render(request, "staff/user_password.html", {"person": person, "form": form})


@staff_required
@require_POST
def set_user_tier(request: SignedInRequest, username: str) -> HttpResponse:
    person = _get_member_for_user(request.user, username)
    form = UserTierForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose one of the tiers.")
    else:
        moved = actions.set_user_tier(_actor(request), person, form.cleaned_data["tier"])
        messages.success(request, f"Moved {moved} live key(s) of {person} to {form.cleaned_data['tier']}.")
    return redirect("staff-users")


# -- tiers --------------------------------------------------------------------------------------

@staff_required
@require_safe
def tiers(request: SignedInRequest) -> HttpResponse:
    rows = Tier.objects.annotate(live_keys=Count("api_keys", filter=Q(api_keys__revoked_at=None)))
    return render(request, "staff/tiers.html", {"tiers": rows})


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


# -- replicas -----------------------------------------------------------------------------------

@staff_required
@require_safe
def replicas(request: SignedInRequest) -> HttpResponse:
    readings = {reading["name"]: reading for reading in async_to_sync(polling.latest_readings)()}
    for reading in readings.values():
        reading["polled_at"] = dt.datetime.fromtimestamp(reading["taken_at"], tz=dt.UTC)
    rows = [(replica, readings.get(replica.name)) for replica in Replica.objects.prefetch_related("tiers")]
    return render(request, "staff/replicas.html", {"rows": rows})


@staff_required
def add_replica(request: SignedInRequest) -> HttpResponse:
    form = ReplicaForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            replica = actions.save_replica(_actor(request), form.instance, form.changes(),
                                           form.cleaned_data["tiers"])
        except ValidationError as exc:  # another change made the deployments overlap since clean()
            form.add_error(None, exc)
        else:
            messages.success(request, f"Added replica {replica}. The next poll shows its health.")
            return redirect("staff-replicas")
    return render(request, "staff/replica_form.html", {"form": form})


@staff_required
@require_POST
def replica_state(request: SignedInRequest, name: str, state: str) -> HttpResponse:
    if state not in REPLICA_STATES:
        raise Http404
    replica = _get_replica_for_user(request.user, name)
    try:
        actions.set_replica_state(_actor(request), replica, state)
    except ValidationError as exc:
        messages.error(request, f"{replica} stays disabled: {' '.join(exc.messages)}")
        return redirect("staff-replicas")
    done = {"enable": "Enabled", "disable": "Disabled", "drain": "Draining"}[state]
    messages.success(request, f"{done} {replica}.")
    return redirect("staff-replicas")


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
    alert = actions.acknowledge(_actor(request), _get_alert_for_user(request.user, alert_id))
    messages.success(request, f"Acknowledged: {alert}.")
    return redirect("staff-alerts")


@staff_required
@require_safe
def audit(request: SignedInRequest) -> HttpResponse:
    page = Paginator(AuditEntry.objects.all(), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "staff/audit.html", {"page": page})
