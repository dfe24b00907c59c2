"""The admin JSON API's usage report: GET /api/admin/usage, the same report as the staff page's
/staff/usage.json (fairness.portal.reports.usage), for scripts holding an admin token."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from fairness.portal.api.admin.api import AdminTokenAuth, StaffSession
from fairness.portal.reports import usage as usage_report
from fairness.portal.signed_in import AdminApiRequest

router = Router(tags=["admin"], auth=[AdminTokenAuth(), StaffSession()])


class UsageQuery(Schema):
    # Strings, not dates: a bad one gets the report's own sentence, not a schema error.
    from_: str | None = Field(None, alias="from", description="First day, YYYY-MM-DD.")
    to: str | None = Field(None, description="The day after the last, YYYY-MM-DD.")
    by: str = Field("account", description="One or two of account, user, key, model, tier, e.g. account,user.")


def _date(text: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise HttpError(400, f"{name}: enter a date as YYYY-MM-DD.") from None


@router.get("/usage", summary="Usage over a range of days")
def usage(request: AdminApiRequest, query: Query[UsageQuery]) -> dict[str, Any]:
    """Requests, tokens, weighted tokens (what fair share charges), errors (status >= 400) and
    nearest-rank queue-wait and time-to-first-token percentiles per group, over [from, to) in UTC
    days (default: this month so far). `by`: one or two of account, user, key, model, tier."""
    today = timezone.now().date()
    start = _date(query.from_, "from") if query.from_ else today.replace(day=1)
    end = _date(query.to, "to") if query.to else today + dt.timedelta(days=1)
    try:
        return usage_report.report(start, end, usage_report.parse_grouping(query.by)).as_json()
    except usage_report.BadReport as exc:
        raise HttpError(400, str(exc)) from None
