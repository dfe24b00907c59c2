"""Staff pages for replicas: the list, add and edit (with a probe), delete, and the state buttons
(enable, drain, stop draining, disable after a confirmation). Every change goes through
fairness.actions, which writes the audit log."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_safe

from fairness.actions import replicas as replica_actions
from fairness.actions.replicas import save_replica, set_replica_state
from fairness.models import EngineSample, Replica
from fairness.portal import replica_probe
from fairness.portal.forms import ReplicaPageForm as ReplicaForm
from fairness.portal.pages.common import page_actor, staff_required
from fairness.portal.reports.queries import last_samples
from fairness.portal.signed_in import SignedInRequest
from fairness.telemetry import gpu_metrics, polling
from fairness.telemetry.gpu_metrics import GpuFigures

if TYPE_CHECKING:
    from django.contrib.auth.models import User

REPLICA_STATES = ("enable", "disable", "drain")
# A change to any of these may make a replica that answered stop answering: probe again.
PROBED_FIELDS = ("base_url", "model", "api_key")


def _get_replica_for_user(user: User, name: str) -> Replica:
    # Behind staff_required already; repeated so the helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404
    return get_object_or_404(Replica.objects.prefetch_related("tiers"), name=name)


@staff_required
@require_safe
def replicas(request: SignedInRequest) -> HttpResponse:
    readings = {reading["name"]: reading for reading in async_to_sync(polling.latest_readings)()}
    for reading in readings.values():
        reading["polled_at"] = dt.datetime.fromtimestamp(reading["taken_at"], tz=dt.UTC)
    rows = list(Replica.objects.prefetch_related("tiers"))
    # A disabled replica is no longer polled: its last stored sample stands in for a reading.
    last = last_samples(r.pk for r in rows if r.name not in readings)
    return render(request, "staff/replicas.html", {
        "rows": [(replica, readings.get(replica.name), last.get(replica.pk),
                  _gpu(readings.get(replica.name), last.get(replica.pk))) for replica in rows],
    })


def _gpu(reading: dict[str, Any] | None, last: EngineSample | None) -> GpuFigures | None:
    """What its GPU exporter said at the last poll (or, no longer polled, in its last sample)."""
    if reading is not None:
        return GpuFigures.from_json(reading.get("gpu"))
    return GpuFigures.from_sample(last) if last is not None else None


def _saved(request: SignedInRequest, form: ReplicaForm, creating: bool) -> HttpResponse | None:
    """Saves the form's replica and says what happened; None when the save was refused."""
    before = {name: form.initial.get(name) for name in PROBED_FIELDS}  # the instance has the new values
    try:
        replica = save_replica(page_actor(request), form.instance, form.changes(), form.cleaned_data["tiers"])
    except ValidationError as exc:  # another change made the deployments overlap since clean()
        form.add_error(None, exc)
        return None
    messages.success(request, f"{'Added' if creating else 'Saved'} replica {replica}.")
    if replica.gpu_metrics_url and "gpu_metrics_url" in form.changed_data:
        _say_what_the_exporter_said(request, replica)
    if form.engine is None:  # nothing the engine would answer differently: it was not asked
        return redirect("staff-replicas")
    if creating or any(before[name] != getattr(replica, name) for name in PROBED_FIELDS):
        warning = replica_probe.model_warning(replica, form.engine)
        if warning:
            messages.warning(request, f"{warning} The gateway routes to it anyway; check the address and model.")
        else:
            messages.info(request, f"{replica} answered and serves {replica.model}.")
    crowded = replica_probe.cache_warning(replica, form.engine)
    if crowded:
        messages.warning(request, crowded)
    return redirect("staff-replicas")


def _say_what_the_exporter_said(request: SignedInRequest, replica: Replica) -> None:
    """One look at a newly named GPU exporter, so a wrong address shows now rather than as a
    missing line later. Its figures or a warning, never its answer (as the engine's probe)."""
    figures = async_to_sync(gpu_metrics.scrape)(replica.gpu_metrics_url)
    if figures is None:
        messages.warning(request, f"The GPU exporter at {replica.gpu_metrics_url} gave no GPU figures: check the "
                                  "address (dcgm-exporter serves /metrics, on port 9400 unless told otherwise).")
    else:
        messages.info(request, f"The GPU exporter answered: {figures.in_words()}.")


@staff_required
def add_replica(request: SignedInRequest) -> HttpResponse:
    form = ReplicaForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        done = _saved(request, form, creating=True)
        if done:
            return done
    return render(request, "staff/replica_form.html", {"form": form, "replica": None})


@staff_required
def edit_replica(request: SignedInRequest, name: str) -> HttpResponse:
    replica = _get_replica_for_user(request.user, name)
    form = ReplicaForm(request.POST or None, instance=replica)
    if request.method == "POST" and form.is_valid():
        done = _saved(request, form, creating=False)
        if done:
            return done
    return render(request, "staff/replica_form.html", {"form": form, "replica": replica})


@staff_required
def delete_replica(request: SignedInRequest, name: str) -> HttpResponse:
    replica = _get_replica_for_user(request.user, name)
    if request.method == "POST":
        replica_actions.delete_replica(page_actor(request), replica)
        messages.success(request, f"Deleted replica {name}. The gateways stop routing to it within a second.")
        return redirect("staff-replicas")
    return render(request, "staff/replica_delete.html", {"replica": replica})


@staff_required
def replica_state(request: SignedInRequest, name: str, state: str) -> HttpResponse:
    """POST changes the state; a GET of disable asks first (like Revoke), of the rest is refused."""
    if state not in REPLICA_STATES:
        raise Http404
    replica = _get_replica_for_user(request.user, name)
    if request.method != "POST":
        if state == "disable" and request.method in ("GET", "HEAD"):
            return render(request, "staff/replica_disable.html", {"replica": replica})
        return HttpResponse(status=405, headers={"Allow": "GET, POST" if state == "disable" else "POST"})
    was_draining = replica.enabled and replica.draining
    try:
        set_replica_state(page_actor(request), replica, state)
    except ValidationError as exc:
        messages.error(request, f"{replica} stays disabled: {' '.join(exc.messages)}")
        return redirect("staff-replicas")
    if state == "enable" and was_draining:
        messages.success(request, f"{replica} stopped draining: it takes new requests again.")
    else:
        done = {"enable": "Enabled", "disable": "Disabled", "drain": "Draining"}[state]
        messages.success(request, f"{done} {replica}.")
    return redirect("staff-replicas")
