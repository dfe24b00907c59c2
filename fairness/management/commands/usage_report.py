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
            "AccountUtilizationByUser`: Used is weighted tokens (what fair share charges), undecayed, of the "
            "requests recorded in the period; sshare's RawUsage, in the same unit, is decayed and counts all "
            "usage so far (running requests at their estimate), so it is not this figure for any period: "
            "over the same requests it is never more. -t percent shows Used as a percentage of the total "
            "(sreport's -t). --by account,user "
            "(the default) lists every account that used anything, its row summing its members and the "
            "accounts under it, each followed by its users; other groupings (user, key, model, tier, or two "
            "of them) list one row per group. Defaults to this month so far.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="start", help="First day, YYYY-MM-DD (default: the 1st of this month).")
        parser.add_argument("--to", dest="end", help="The day after the last, YYYY-MM-DD (default: tomorrow).")
        parser.add_argument("--by", default="account,user",
                            help=f"One or two of {', '.join(usage_report.GROUPS)}, comma-separated.")
        parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
        parser.add_argument("-t", dest="time_format", type=str.lower, choices=("raw", "percent"), default="raw",
                            help="raw (the default): Used in weighted tokens; percent: as a percentage of the "
                                 "total (the table and JSON; CSV keeps the raw figures).")

    def handle(self, *args: Any, start: str | None, end: str | None, by: str, format: str, time_format: str,
               **options: Any) -> None:
        percent = time_format == "percent"
        if percent and format == "csv":
            raise CommandError("-t percent is for the table and JSON: the CSV keeps the raw figures.")
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
            self.stdout.write(json.dumps(with_percent(report) if percent else report.as_json(), indent=2))
        elif format == "csv":
            self.stdout.write(usage_report.as_csv(report), ending="")
        else:
            self.stdout.write(as_table(report, show_users=levels != ("account",), percent=percent))


def percent_of(report: Report, used: float) -> float:
    total = report.total.weighted_tokens
    return 100 * used / total if total > 0 else 0.0


def with_percent(report: Report) -> dict[str, Any]:
    """The JSON with each row's (and the total's) Used as a percentage of the total beside it."""
    body = report.as_json()
    for row, shown in zip(report.rows, body["rows"], strict=True):
        shown["weighted_tokens_percent"] = percent_of(report, row.weighted_tokens)
    body["total"]["weighted_tokens_percent"] = percent_of(report, report.total.weighted_tokens)
    return body


def as_table(report: Report, show_users: bool = True, percent: bool = False) -> str:
    """sreport's layout: a rule, the period and the unit, a rule, then the columns. In a tree,
    accounts are indented by depth and their users' rows follow with the Login filled in.
    `percent`: Used as a percentage of the total (sreport -t percent)."""
    days = (report.end - report.start).days
    weights = (f"{settings.GP_FAIRSHARE_WEIGHT_PROMPT:g} x prompt + "
               f"{settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT:g} x cached prompt + "
               f"{settings.GP_FAIRSHARE_WEIGHT_COMPLETION:g} x completion tokens")
    kind = "Account/User Utilization" if report.tree else f"Utilization by {'/'.join(TITLES[b] for b in report.by)}"
    lines = [RULE, f"{kind} {report.start.isoformat()} - {report.end.isoformat()} "
                   f"({days} day{'s' if days != 1 else ''}, UTC, the end day not included)",
             f"Usage reported in {'percent of the total ' if percent else ''}weighted tokens ({weights}), "
             f"undecayed"]
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
            if percent and name == "weighted_tokens":
                out.append(f"{percent_of(report, value):.2f}%".rjust(width))
                continue
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
