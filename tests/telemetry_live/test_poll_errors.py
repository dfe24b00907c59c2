"""A failed scrape says the status and a generic reason, never what the answer said: a replica
address pointed at a metadata service must not put its credentials on the staff pages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.telemetry import poll

SECRET = "AKIA-not-a-real-key-7Q2"
ANSWERS = {  # path prefix -> (status, body)
    "/meta": (200, f'{{"AccessKeyId": "{SECRET}", "SecretAccessKey": "{SECRET}", "Token": "t"}}'),
    "/html": (200, f"<html><body>Welcome, token {SECRET}</body></html>"),
    "/denied": (403, f'{{"error": "forbidden for {SECRET}"}}'),
    "/broken": (500, f"Traceback ... {SECRET}"),
}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 -- the name http.server calls
        status, body = next(answer for prefix, answer in ANSWERS.items() if self.path.startswith(prefix))
        data = body.encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def talkative() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_scrape_errors_show_the_status_never_the_body(transactional_db, redis_url, staff_client, talkative):
    for prefix in ANSWERS:
        Replica.objects.create(name=prefix.strip("/"), base_url=talkative + prefix, model=MODEL)
    readings = {r.replica.name: r for r in poll().readings}
    assert sorted(readings) == ["broken", "denied", "html", "meta"]
    assert not any(reading.healthy for reading in readings.values())
    for reading in readings.values():
        assert SECRET not in reading.error and "Access" not in reading.error
    assert "HTTP 403" in readings["denied"].error and "HTTP 500" in readings["broken"].error
    assert "HTTP 200" in readings["meta"].error and "Prometheus" in readings["meta"].error
    page = staff_client.get("/staff/replicas/").content.decode()
    assert "HTTP 403" in page and SECRET not in page
