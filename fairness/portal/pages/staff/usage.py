"""The staff usage report: a date range and a grouping in the query string, answered as a page
(table and chart), CSV or JSON, all from fairness.portal.reports.usage. The three take the same
parameters (`from`, `to`: YYYY-MM-DD, `to` not included; `by`: one or two of account, user,
key, model, tier), so a link copied from the page downloads exactly what it shows."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from fairness.portal.pages.common import staff_required
from fairness.portal.reports import usage as usage_report
from fairness.portal.signed_in import SignedInRequest
from fairness.scheduling.fair_share import weighted_tokens

CHART_ROWS = 25  # the largest groups; the table and the downloads have them all
GROUP_TITLES = {"account": "Account", "user": "User", "key": "Key", "model": "Model", "tier": "Tier"}


def _grouping_label(value: str) -> str:
    return " then ".join(GROUP_TITLES[level].lower() for level in value.split(","))


class UsageReportForm(forms.Form):
    """`from` is a Python keyword, so the fields are added by name rather than declared."""

    def __init__(self, data: dict[str, str]) -> None:
        super().__init__(data)
        date = forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")
        bad_date = {"invalid": "Enter a date as YYYY-MM-DD.", "required": "Enter a date as YYYY-MM-DD."}
        self.fields["from"] = forms.DateField(label="From", input_formats=["%Y-%m-%d"], widget=date,
                                              error_messages=bad_date)
        self.fields["to"] = forms.DateField(label="To (not included)", input_formats=["%Y-%m-%d"], widget=date,
                                            error_messages=bad_date)
        groupings = list(usage_report.COMMON_GROUPINGS)
        if data.get("by") and data["by"] not in groupings and self._valid_grouping(data["by"]):
            groupings.append(data["by"])  # a valid grouping from a URL stays selected
        self.fields["by"] = forms.CharField(
            label="Group by", widget=forms.Select(choices=[(g, _grouping_label(g)) for g in groupings]))

    @staticmethod
    def _valid_grouping(text: str) -> bool:
        try:
            usage_report.parse_grouping(text)
        except usage_report.BadReport:
            return False
        return True

    def clean_by(self) -> tuple[str, ...]:
        try:
            return usage_report.parse_grouping(self.cleaned_data["by"])
        except usage_report.BadReport as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("from") and data.get("to"):
            try:
                usage_report.day_range(data["from"], data["to"])
            except usage_report.BadReport as exc:
                self.add_error("to", str(exc))
        return data


def _defaults(today: dt.date) -> dict[str, str]:
    """This month so far, today included; by account."""
    return {"from": today.replace(day=1).isoformat(), "to": (today + dt.timedelta(days=1)).isoformat(),
            "by": "account"}


def _report_for(request: SignedInRequest) -> tuple[UsageReportForm, usage_report.Report | None]:
    """The form (bound to the query string, defaults where it says nothing) and its report, or
    None with the reasons on the form."""
    defaults = _defaults(timezone.now().date())
    form = UsageReportForm({name: request.GET.get(name, "").strip() or value for name, value in defaults.items()})
    if not form.is_valid():
        return form, None
    data = form.cleaned_data
    try:
        return form, usage_report.report(data["from"], data["to"], data["by"])
    except usage_report.BadReport as exc:
        form.add_error(None, str(exc))
        return form, None


def _problems(form: UsageReportForm) -> str:
    return " ".join(f"{'' if name == '__all__' else name + ': '}{' '.join(map(str, errors))}"
                    for name, errors in form.errors.items())


def _filename(report: usage_report.Report, extension: str) -> str:
    return f"usage_{report.start.isoformat()}_to_{report.end.isoformat()}_by_{'-'.join(report.by)}.{extension}"


def _chart_data(report: usage_report.Report) -> dict[str, Any]:
    rows = report.rows[:CHART_ROWS]
    return {
        "labels": [" / ".join(row.group) for row in rows],
        "prompt": [weighted_tokens(row.prompt_tokens, 0, settings.GP_FAIRSHARE_WEIGHT_PROMPT, 0,
                                   cached=row.cached_tokens, w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT)
                   for row in rows],
        "completion": [settings.GP_FAIRSHARE_WEIGHT_COMPLETION * row.completion_tokens for row in rows],
        "shown": len(rows), "of": len(report.rows),
    }


@staff_required
@require_safe
def usage(request: SignedInRequest) -> HttpResponse:
    form, report = _report_for(request)
    query = urlencode({name: form.data[name] for name in ("from", "to", "by")})
    return render(request, "staff/usage.html", {
        "form": form, "report": report, "query": query,
        "headings": [GROUP_TITLES[level] for level in report.by] if report else [],
        "chart": _chart_data(report) if report else None,
        "weights": {"prompt": settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                    "cached_prompt": settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT,
                    "completion": settings.GP_FAIRSHARE_WEIGHT_COMPLETION},
        "days_kept": settings.GP_USAGE_RECORDS_DAYS,
    }, status=200 if report else 400)


@staff_required
@require_safe
def usage_csv(request: SignedInRequest) -> HttpResponse:
    form, report = _report_for(request)
    if report is None:
        return HttpResponse(_problems(form), status=400, content_type="text/plain; charset=utf-8")
    response = HttpResponse(usage_report.as_csv(report), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(report, "csv")}"'
    return response


@staff_required
@require_safe
def usage_json(request: SignedInRequest) -> JsonResponse:
    form, report = _report_for(request)
    if report is None:
        return JsonResponse({"error": {"message": _problems(form), "type": "invalid_request_error",
                                       "code": "bad_report"}}, status=400)
    response = JsonResponse(report.as_json())
    response["Content-Disposition"] = f'inline; filename="{_filename(report, "json")}"'
    return response
