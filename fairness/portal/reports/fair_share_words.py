"""The fair-share policy in plain words, for the public capacity page and the staff accounts page.

Each sentence must stay true of what admission does (scheduling/lua/lib/fair_share.lua): usage that halves
every GP_FAIRSHARE_HALF_LIFE_HOURS, and a heavy user's request ranked later within its tier by at
most the tier's fairshare_weight_seconds, while ageing still moves it forward.
"""

from __future__ import annotations

from django.conf import settings

from fairness.portal.reports.tier_policy import duration_in_words

_WEEK, _DAY = 168.0, 24.0


def half_life_in_words(hours: float | None = None) -> str:
    """168 -> "a week", 336 -> "2 weeks", 24 -> "a day", 72 -> "3 days", 12 -> "12 hours"."""
    hours = settings.GP_FAIRSHARE_HALF_LIFE_HOURS if hours is None else hours
    for unit, name in ((_WEEK, "week"), (_DAY, "day")):
        count = hours / unit
        if count >= 1 and count.is_integer():
            return f"a {name}" if count == 1 else f"{count:g} {name}s"
    if hours == 1:
        return "an hour"
    return duration_in_words(hours * 3600)


def policy_paragraph(longest_weight_seconds: float) -> str:
    """What decides whose request goes first within a tier; no one's usage, no names.
    `longest_weight_seconds`: the largest fairshare_weight_seconds of any tier."""
    shares = (
        "Within a tier the endpoint is shared by account: each account holds shares of it, split "
        "among its members by their own shares. What everyone uses is counted in tokens, and that "
        f"count halves in {half_life_in_words()} and keeps halving, so old use fades away."
    )
    if longest_weight_seconds <= 0:
        return shares + " Fair share is switched off in every tier now: requests line up by " \
                         "arrival and head start alone."
    return shares + (
        " Among requests waiting in one tier, those of people who used less than their share lately "
        "go first; a heavier user's request lines up as if it had arrived later, by at most "
        f"{duration_in_words(longest_weight_seconds)}. It still ages like every other request, so "
        "every wait stays bounded."
    )
