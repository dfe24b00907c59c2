"""Staff pages for tiers: the list, with each one's policy in words, and the form that makes or
changes one (through fairness.actions, audited)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.db.models import Count, Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_safe

from fairness.actions.tiers import save_tier
from fairness.models import Tier
from fairness.portal.forms import TierForm
from fairness.portal.pages.common import page_actor, staff_only, staff_required
from fairness.portal.reports.tier_policy import in_words
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _get_tier_for_user(user: User, name: str) -> Tier:
    staff_only(user)
    return get_object_or_404(Tier, name=name)


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
        save_tier(page_actor(request), form.instance, form.changes())
        messages.success(request, f"{'Created' if creating else 'Saved'} tier {form.instance}.")
        return redirect("staff-tiers")
    return render(request, "staff/tier_form.html", {"form": form, "tier": tier})
