"""What the portal's log says of requests that are not failures: a refused page is one line, and a
browser's /favicon.ico finds the icon."""

from __future__ import annotations

import logging

import pytest
from django.test import Client


def test_a_refused_page_is_logged_in_one_line_without_a_traceback(researcher_client, caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = researcher_client.get("/staff/users/")
    assert response.status_code == 403
    refused = [record for record in caplog.records if record.name == "django.request"]
    assert [record.getMessage() for record in refused] == ["Forbidden (Permission denied): /staff/users/"]
    assert refused[0].exc_info is None
    assert "Traceback" not in caplog.text


@pytest.mark.django_db
def test_favicon_ico_leads_to_the_portals_icon(caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = Client().get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("favicon.svg")
    assert not [record for record in caplog.records if record.name == "django.request"]
