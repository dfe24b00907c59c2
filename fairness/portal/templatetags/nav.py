"""The header's links, marked as the current page for screen readers and the underline."""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.simple_tag(takes_context=True)
def nav_link(context: template.Context, url_name: str, label: str, exact: bool = False) -> SafeString:
    """A section's link is current on its sub-pages too (issuing a key is still Keys)."""
    url = reverse(url_name)
    path = context["request"].path
    current = path == url if exact else path.startswith(url)
    if current:
        return format_html('<a href="{}" aria-current="page">{}</a>', url, label)
    return format_html('<a href="{}">{}</a>', url, label)
