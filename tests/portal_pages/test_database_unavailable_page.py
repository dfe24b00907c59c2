"""The pages' answer when the database fails a view (fairness/portal/middleware.py): a 503 page of
its own, or JSON under /api/, with Retry-After, logged once as a warning; any other error is left
to Django. (tests/portal_live/test_database_unavailable_browser.py stops a real PostgreSQL.)"""

from __future__ import annotations

import logging

import pytest
from django.db.utils import DataError, InterfaceError, OperationalError
from django.test import RequestFactory

from fairness.portal.middleware import DatabaseUnavailable


def middleware() -> DatabaseUnavailable:
    return DatabaseUnavailable(lambda request: None)  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("error", [OperationalError("connection refused"), InterfaceError("connection already closed")])
def test_a_page_the_database_failed_is_a_503_page_logged_once_without_a_traceback(error, caplog):
    with caplog.at_level(logging.WARNING):
        response = middleware().process_exception(RequestFactory().get("/me/"), error)
    assert response is not None and response.status_code == 503
    assert response["Content-Type"].startswith("text/html") and int(response["Retry-After"]) > 0
    text = response.content.decode()
    assert "cannot reach its database" in text and "Traceback" not in text and "connection" not in text
    assert 'id="site-nav"' not in text  # no menu: who is signed in, only the database knows
    assert response._has_been_logged  # Django's request log does not say it again, as an error
    assert all(record.exc_info is None for record in caplog.records)


def test_the_json_api_the_database_failed_answers_json():
    response = middleware().process_exception(RequestFactory().get("/api/replicas"), OperationalError("refused"))
    assert response is not None and response.status_code == 503 and int(response["Retry-After"]) > 0
    assert response["Content-Type"] == "application/json"
    assert b'"code": "database_unavailable"' in response.content


def test_other_errors_are_left_to_django():
    assert middleware().process_exception(RequestFactory().get("/me/"), DataError("value too long")) is None
    assert middleware().process_exception(RequestFactory().get("/me/"), ValueError("bug")) is None
