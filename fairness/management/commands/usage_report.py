import datetime as dt
import json
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from fairness.portal.reports import usage as usage_report
from fairness.portal.reports.usage import Report

RULE = "-" * 100
# Slurm's sreport headings where it has one (Account, Login, Used); the rest are ours.
FIGURE_COLUMNS = (("Used", "weighted_tokens", 14), ("Requests", "requests", 10), ("Errors", "errors", 8),
                  ("Prompt", "prompt_tokens", 12), ("Completion", "completion_tokens", 12),
                  ("QueueP50ms", "queue_p50_ms", 11), ("QueueP95ms", "queue_p95_ms", 11),
                  ("TTFTP50ms", "ttft_p50_ms", 10), ("TTFTP95ms", "ttft_p95_ms", 10))
TITLES = {"account": "Account", "user": "Login", "key": "Key", "model": "Model", "tier": "Tier"}


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a date: give it as YYYY-MM-DD.") from None


class Command(BaseCommand):
    help = ("Usage over a range of days (UTC, --to not included), like Slurm's `sreport cluster "
            "AccountUtilizationByUser`: Used is weighted tokens (what fair share charges). --by account,user "
            "(the default) lists every account that used anything, its row summing its members and the "
            "accounts under it, each followed by its users; other groupings (user, key, model, tier, or two "
            "of them) list one row per group. Defaults to this month so far.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="start", help="First day, YYYY-MM-DD (default: the 1st of this month).")
        parser.add_argument("--to", dest="end", help="The day after the last, YYYY-MM-DD (default: tomorrow).")
        parser.add_argument("--by", default="account,user",
                            help=f"One or two of {', '.join(usage_report.GROUPS)}, comma-separated.")
        parser.add_argument("--format", choices=("table", "csv", "json"), default="table")

    def handle(self, *args: Any, start: str | None, end: str | None, by: str, format: str, **options: Any) -> None:
        today = timezone.now().date()
        first = _date(start) if start else today.replace(day=1)
        last = _date(end) if end else today + dt.timedelta(days=1)
        try:
            levels = usage_report.parse_grouping(by)
            if levels in (("account",), ("account", "user")):
                report = usage_report.account_tree(first, last, with_users=levels == ("account", "user"))
            else:
                report = usage_report.report(first, last, levels)
        except usage_report.BadReport as exc:
            raise CommandError(str(exc)) from None
        if format == "json":
            self.stdout.write(json.dumps(report.as_json(), indent=2))
        elif format == "csv":
            self.stdout.write(usage_report.as_csv(report), ending="")
        else:
            self.stdout.write(as_table(report, show_users=levels != ("account",)))


def as_table(report: Report, show_users: bool = True) -> str:
    """sreport's layout: a rule, the period and the unit, a rule, then the columns. In a tree,
    accounts are indented by depth and their users' rows follow with the Login filled in."""
    days = (report.end - report.start).days
    weights = (f"{settings.GP_FAIRSHARE_WEIGHT_PROMPT:g} x prompt + "
               f"{settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT:g} x cached prompt + "
               f"{settings.GP_FAIRSHARE_WEIGHT_COMPLETION:g} x completion tokens")
    kind = "Account/User Utilization" if report.tree else f"Utilization by {'/'.join(TITLES[b] for b in report.by)}"
    lines = [RULE, f"{kind} {report.start.isoformat()} - {report.end.isoformat()} "
                   f"({days} day{'s' if days != 1 else ''}, UTC, the end day not included)",
             f"Usage reported in weighted tokens ({weights})"]
    if report.reaches_past_retention:
        lines.append(f"Records are kept {settings.GP_USAGE_RECORDS_DAYS:g} days: nothing before "
                     f"{report.kept_since:%Y-%m-%d %H:%M} UTC is counted")
    lines.append(RULE)
    by = report.by if show_users or not report.tree else ("account",)
    names = [[(" " * row.depth + row.group[0]) if report.tree else row.group[0], *row.group[1:len(by)]]
             for row in report.rows]
    widths = [max([len(TITLES[level]), 10, *(len(n[i]) for n in names)]) for i, level in enumerate(by)]
    head = [*(f"{TITLES[level]:<{w}}" for level, w in zip(by, widths, strict=True)),
            *(f"{title:>{w}}" for title, _, w in FIGURE_COLUMNS)]
    lines += [" ".join(head), " ".join("-" * w for w in [*widths, *(w for *_, w in FIGURE_COLUMNS)])]

    def figures(row: usage_report.Row) -> list[str]:
        out = []
        for _, name, width in FIGURE_COLUMNS:
            value = getattr(row, name)
            text = "" if value is None else f"{value:.0f}" if isinstance(value, float) else str(value)
            out.append(f"{text:>{width}}")
        return out

    for name, row in zip(names, report.rows, strict=True):
        lines.append(" ".join([*(f"{n:<{w}}" for n, w in zip(name, widths, strict=True)), *figures(row)]))
    if not report.rows:
        lines.append("(no requests in this period)")
    else:
        total = ["Total".ljust(widths[0]), *("".ljust(w) for w in widths[1:])]
        lines += [" ".join("-" * w for w in [*widths, *(w for *_, w in FIGURE_COLUMNS)]),
                  " ".join([*total, *figures(report.total)])]
    return "\n".join(lines)
