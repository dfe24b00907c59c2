"""Numbers as the pages print them; static/js/capacity.js formats the same way after each poll."""

from __future__ import annotations

from django import template

register = template.Library()

NONE = "–"


@register.filter
def rate(value: float | None) -> str:
    """Tokens per second: whole numbers with separators; one decimal below ten, where it matters."""
    if value is None:
        return NONE
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


@register.filter
def count(value: float | None) -> str:
    """A gauge (requests running or waiting): averaged or shared out it can be fractional."""
    if value is None:
        return NONE
    return f"{round(value, 1):g}"


@register.filter
def percent(value: float | None) -> str:
    if value is None:
        return NONE
    return f"{100 * value:.0f}%"
