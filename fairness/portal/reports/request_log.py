"""The request log: what happened to each request, from its usage record (one row per request:
when it arrived, what held it in the queue, where it ran, how it ended, what it was charged).

For the staff page (everyone's), one's own page and /api/me/requests (a person's own), and their
CSV. Pages go by keyset on (created_at, id), newest first, never by OFFSET or COUNT: a page deep in
a table of millions costs what the first does. No prompt or answer is ever stored, so none is
shown. Records are kept GP_USAGE_RECORDS_DAYS days (the prune_usage task).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import get_user_model

from fairness.models import Replica, UsageRecord, UsageRecordQuerySet
from fairness.scheduling.fair_share import weighted_tokens

PAGE_SIZE = 50
FILTER_LENGTH = 200  # the longest column a text filter is compared with (model)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# A spreadsheet runs a cell that starts with one of these as a formula; model names and
# usernames are chosen by people.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_COLUMNS = (
    "arrived_utc", "request_id", "person", "key", "front_end", "endpoint", "model", "tier", "replica", "status",
    "ended", "held_by", "refusal", "queued_ms", "queue_estimate_ms", "ttft_ms", "latency_ms", "prompt_tokens",
    "cached_tokens", "completion_tokens", "weighted_tokens",
)


class BadFilter(ValueError):
    """A filter the log cannot read (its message says which and how to write it)."""


@dataclass(frozen=True)
class LogFilters:
    """What the page's form (or the API's query) asks for; empty: anything. `person` is a
    username (the staff page's alone: one's own log is always one's own)."""

    person: str = ""
    key: str = ""
    model: str = ""
    status: int | None = None
    ended: str = ""
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    problems: tuple[str, ...] = field(default=())

    def query(self) -> dict[str, str]:
        """The filters as the query string says them (for the links to other pages and the CSV)."""
        said = {"person": self.person, "key": self.key, "model": self.model,
                "status": "" if self.status is None else str(self.status), "ended": self.ended,
                "from": _said_time(self.start), "to": _said_time(self.end)}
        return {name: value for name, value in said.items() if value}


def _said_time(at: dt.datetime | None) -> str:
    return "" if at is None else at.strftime("%Y-%m-%dT%H:%M")


def _text(raw: Mapping[str, str], name: str) -> str:
    # A NUL is refused by PostgreSQL in text: dropped, as the audit log's filters do.
    return str(raw.get(name, "")).replace("\x00", "").strip()[:FILTER_LENGTH]


def _time(raw: str, name: str) -> dt.datetime | None:
    """A UTC time as an <input type=datetime-local> sends it (or a date: its midnight)."""
    if not raw:
        return None
    try:
        at = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise BadFilter(f"{name}: enter a time as YYYY-MM-DD HH:MM (UTC), or a date.") from None
    return at.replace(tzinfo=dt.UTC) if at.tzinfo is None else at.astimezone(dt.UTC)


def read_filters(raw: Mapping[str, str], *, with_person: bool) -> LogFilters:
    """The filters from a query string; what cannot be read is left out and said in `problems`."""
    problems: list[str] = []
    status: int | None = None
    said_status = _text(raw, "status")
    if said_status:
        if said_status.isdigit() and 100 <= int(said_status) <= 599:
            status = int(said_status)
        else:
            problems.append("status: enter an HTTP status, 100 to 599.")
    ended = _text(raw, "ended")
    if ended and ended not in UsageRecord.Ended.values:
        problems.append("ended: choose one of the endings listed.")
        ended = ""
    times: dict[str, dt.datetime | None] = {}
    for name in ("from", "to"):
        try:
            times[name] = _time(_text(raw, name), name)
        except BadFilter as exc:
            problems.append(str(exc))
            times[name] = None
    start, end = times["from"], times["to"]
    if start is not None and end is not None and end <= start:
        problems.append("to: must come after from.")
        end = None
    return LogFilters(
        person=_text(raw, "person") if with_person else "", key=_text(raw, "key"), model=_text(raw, "model"),
        status=status, ended=ended, start=start, end=end, problems=tuple(problems),
    )


def rows_for(filters: LogFilters, person_id: int | None = None) -> UsageRecordQuerySet:
    """The records the filters pick, newest first; `person_id` fixes whose (one's own log)."""
    if filters.person:
        found = get_user_model().objects.filter(username=filters.person).values_list("pk", flat=True).first()
        if found is None or (person_id is not None and found != person_id):
            return UsageRecord.objects.none()
        person_id = found
    return UsageRecord.objects.matching(
        person_id=person_id, key_prefix=filters.key, model=filters.model, status=filters.status,
        ended=filters.ended, start=filters.start, end=filters.end,
    ).select_related("key", "person").newest_first()


# -- pages ------------------------------------------------------------------------------------

def cursor_of(record: UsageRecord) -> str:
    """Where a page starts or ends: the record's (created_at, id), as text for a URL."""
    delta = record.created_at - _EPOCH
    return f"{(delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds}_{record.pk}"


def read_cursor(text: str) -> tuple[dt.datetime, int] | None:
    """A cursor back to (created_at, id); None for one that is not."""
    micros, _, row_id = text.partition("_")
    if not (micros.isdigit() and row_id.isdigit()) or len(micros) > 20:
        return None
    try:
        return _EPOCH + dt.timedelta(microseconds=int(micros)), int(row_id)
    except OverflowError:
        return None


@dataclass(frozen=True)
class LogPage:
    rows: list[UsageRecord]
    newer: str | None  # the cursor of the page before (newer records), if there is one
    older: str | None  # the cursor of the page after (older records), if there is one


def page_of(rows: UsageRecordQuerySet, *, before: str = "", after: str = "", size: int = PAGE_SIZE) -> LogPage:
    """One page: the newest `size` rows, or those just older than the cursor `before`, or just
    newer than `after`."""
    older_than, newer_than = read_cursor(before), read_cursor(after)
    if newer_than is not None:
        found = list(rows.newer_than(*newer_than)[:size + 1])
        more = len(found) > size
        found = found[:size][::-1]
        return LogPage(found, cursor_of(found[0]) if more and found else None,
                       cursor_of(found[-1]) if found else None)
    if older_than is not None:
        rows = rows.older_than(*older_than)
    found = list(rows[:size + 1])
    more = len(found) > size
    found = found[:size]
    return LogPage(found, cursor_of(found[0]) if older_than is not None and found else None,
                   cursor_of(found[-1]) if more else None)


@dataclass(frozen=True)
class LogRow:
    record: UsageRecord
    charge: float  # weighted tokens
    front_end: str


def page_context(filters: LogFilters, page: LogPage) -> dict[str, object]:
    """What the log's form and table need, on the staff page and one's own alike."""
    return {
        "filters": filters, "page": page, "rows": [LogRow(r, charge_of(r), front_end_of(r)) for r in page.rows],
        "query": urlencode(filters.query()), "endings": UsageRecord.Ended.choices,
        "models": sorted(set(Replica.objects.values_list("model", flat=True))),
        "days_kept": settings.GP_USAGE_RECORDS_DAYS,
    }


# -- one request ----------------------------------------------------------------------------------

def detail_context(record: UsageRecord) -> dict[str, object]:
    """What a request's own page shows, the staff's and its owner's alike."""
    return {
        "record": record, "timeline": timeline(record), "charge": charge_of(record),
        "front_end": front_end_of(record), "held": held_words(record),
    }


def charge_of(record: UsageRecord) -> float:
    """The weighted tokens it charged (fair share, budgets), from its counts at today's weights."""
    return weighted_tokens(
        record.prompt_tokens, record.completion_tokens, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
        settings.GP_FAIRSHARE_WEIGHT_COMPLETION, cached=record.cached_tokens,
        w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT,
    )


def front_end_of(record: UsageRecord) -> str:
    """The front end its key speaks for people through (Open WebUI, "its label"), or ""."""
    key = record.key
    if not key.front_end:
        return ""
    return f"{key.get_front_end_display()} ({key.label})" if key.label else key.get_front_end_display()


# What held a waiting request, in a sentence's words (the table has the short ones).
_HELD_WORDS: dict[str, str] = {
    UsageRecord.HeldBy.PERSON_CAP.value: "the person's own concurrency cap",
    UsageRecord.HeldBy.TIER_POOL.value: "their tier's pool (its requests at once, all its keys together)",
    UsageRecord.HeldBy.NO_SLOT.value: "no free slot (it was first in line)",
    UsageRecord.HeldBy.FAIR_SHARE_ORDER.value: "others ahead of it in the fair-share order",
}


def held_words(record: UsageRecord) -> str:
    """What held it in the queue, in words; "" when it never waited (or that was not recorded)."""
    return _HELD_WORDS.get(record.held_by, record.held_by)


@dataclass(frozen=True)
class Moment:
    what: str
    after_ms: int  # since it arrived
    at: dt.datetime
    words: str


def timeline(record: UsageRecord) -> list[Moment]:
    """Arrived, queued, admitted, first token, ended: from when it arrived (created_at: the
    gateway had checked its key and read its body) and the durations its record keeps, each
    measured from then."""
    arrived = record.created_at

    def moment(what: str, after_ms: int, words: str) -> Moment:
        return Moment(what, after_ms, arrived + dt.timedelta(milliseconds=after_ms), words)

    moments = [moment("Arrived", 0, f"{record.endpoint} for {record.model}"
                      + (", streamed" if record.stream else "") + (f", tier {record.tier}" if record.tier else ""))]
    if record.held_by or record.queued_ms:
        held = f"held by {held_words(record)}" if record.held_by else "waited"
        estimate = ("" if record.queue_estimate_ms is None
                    else f"; the gateway estimated {record.queue_estimate_ms} ms")
        moments.append(moment("Queued", 0, held + estimate))
    if record.replica:
        moments.append(moment("Admitted", record.queued_ms,
                              f"a slot on {record.replica} after {record.queued_ms} ms in the queue"))
    if record.ttft_ms is not None:
        moments.append(moment("First token", record.ttft_ms, f"{record.ttft_ms} ms after it arrived"))
    moments.append(moment("Ended", record.latency_ms, _ending_words(record)))
    return moments


def _ending_words(record: UsageRecord) -> str:
    ended = record.get_ended_display() if record.ended else "ended"
    refusal = f" ({record.refusal})" if record.refusal else ""
    return f"{ended}{refusal}: status {record.status}, {record.latency_ms} ms after it arrived"


# -- CSV ----------------------------------------------------------------------------------------

def _cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return "" if value is None else value


class _Line:
    """What csv.writer writes to: the line it made, handed back (for a streamed response)."""

    def write(self, line: str) -> str:
        return line


def csv_lines(records: Iterable[UsageRecord]) -> Iterator[str]:
    """The header, then one line per record, RFC 4180 line ends (a CR or LF in a cell gets it
    quoted), a cell a spreadsheet would run as a formula defused with a leading '."""
    writer = csv.writer(_Line())
    yield writer.writerow(CSV_COLUMNS)
    for r in records:
        yield writer.writerow([_cell(value) for value in (
            r.created_at.isoformat(), r.request_id, r.person.get_username() if r.person else "", r.key.prefix,
            front_end_of(r), r.endpoint, r.model, r.tier, r.replica, r.status, r.ended, r.held_by, r.refusal,
            r.queued_ms, r.queue_estimate_ms, r.ttft_ms, r.latency_ms, r.prompt_tokens, r.cached_tokens,
            r.completion_tokens, round(charge_of(r), 3),
        )])
