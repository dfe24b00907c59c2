"""/me/standing/: where the signed-in person stands, in words and tables (their `sshare -u me`
and `sprio`), with their usage per day in both units. The same figures as /api/me/standing."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from fairness.portal.reports.fair_share_words import half_life_in_words
from fairness.portal.reports.my_standing import standing_for
from fairness.portal.signed_in import SignedInRequest


@login_required
def standing(request: SignedInRequest) -> HttpResponse:
    return render(request, "me/standing.html", {"s": standing_for(request.user), "half_life": half_life_in_words()})
