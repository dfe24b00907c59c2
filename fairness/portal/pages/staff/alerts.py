"""The staff alerts page, and acknowledging an alert. (The audit log has a module of its own.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from fairness.actions.alerts import acknowledge
from fairness.models import SaturationAlert
from fairness.portal.pages.common import page_actor, staff_only, staff_required
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _get_alert_for_user(user: User, alert_id: int) -> SaturationAlert:
    staff_only(user)
    return get_object_or_404(SaturationAlert, pk=alert_id)


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
    acknowledge(page_actor(request), alert)
    messages.success(request, f"Acknowledged: {alert}.")
    return redirect("staff-alerts")
