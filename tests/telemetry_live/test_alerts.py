"""Saturation alerts from a real engine's figures; time is injected, so windows pass at once."""

import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica, SaturationAlert
from fairness.telemetry import alert_words, alerts
from fairness.telemetry.saturation import Figures, Transition
from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.processes import free_port
from tests.support.telemetry import load_on, poll, run


@pytest.fixture
def small_engine(transactional_db, redis_url) -> Iterator[EngineSimProcess]:
    process = start_enginesim(model=MODEL, max_num_seqs=2, extra_args=["--speed", "4"])
    Replica.objects.create(name="sim-small", base_url=process.url, model=MODEL, max_num_seqs=2)
    yield process
    process.stop()


def observe(readings, at: float):
    return run(alerts.observe, readings, {}, at)


@pytest.fixture
def readings(small_engine):
    """Real readings of the engine with a queue five times its batch, and once drained."""
    load = load_on(small_engine.url, users=12)
    try:
        wait_for(lambda: small_engine.stats()["waiting"] == 10, timeout=10, what="a full queue")
        saturated = poll().readings
    finally:
        load.stop()
    wait_for(lambda: small_engine.stats()["running"] == 0, timeout=10, what="the queue to drain")
    return saturated, poll().readings


def test_a_sustained_queue_opens_one_alert_and_draining_resolves_it(readings):
    saturated, drained = readings

    for t in range(0, 121, 2):  # two minutes of a queue five times the batch
        observe(saturated, 1000.0 + t)
    alert = SaturationAlert.objects.get()
    assert (alert.model, alert.kind, alert.resolved_at) == (MODEL, "queue", None)
    assert alert.figures["waiting"] == 10 and alert.figures["running"] == 2
    assert "capacity" in alert_words.describe(alert.kind, alert.figures, public=False)

    for t in range(122, 200, 2):
        observe(drained, 1000.0 + t)
    alert.refresh_from_db()
    assert alert.resolved_at is not None
    assert SaturationAlert.objects.count() == 1


def test_a_brief_spike_opens_nothing(readings):
    saturated, drained = readings
    for t in range(0, 20, 2):
        observe(saturated, 1000.0 + t)
    for t in range(20, 200, 2):
        observe(drained, 1000.0 + t)
    assert not SaturationAlert.objects.exists()


@contextmanager
def webhook(status: int) -> Iterator[tuple[int, list[dict]]]:
    """A local webhook answering `status`: its port, and the JSON bodies posted to it."""
    received: list[dict] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, received
    finally:
        server.shutdown()


def test_an_opened_alert_is_posted_to_the_webhook(readings, settings):
    with webhook(204) as (port, received):
        settings.GP_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{port}/hook"
        for t in range(0, 70, 2):
            observe(readings[0], 1000.0 + t)
    assert [(r["event"], r["model"], r["kind"]) for r in received] == [("opened", MODEL, "queue")]


@pytest.mark.parametrize("answer", ["refused", "HTTP 500"])
def test_a_failing_webhook_is_logged_without_its_secret_url(settings, caplog, answer):
    transition = Transition("queue", "opened", at=60.0, started_at=0.0,
                            peak=Figures(waiting=9, running=2, ratio=4.5, kv_usage=None))
    with webhook(500) as (port, _):
        port = port if answer == "HTTP 500" else free_port()
        settings.GP_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{port}/services/T000/B000/s3cr3t-token"
        settings.ADMINS = []
        run(alerts.notify, MODEL, transition)

    assert "alert webhook to 127.0.0.1 failed" in caplog.text
    assert ("HTTP 500" in caplog.text) == (answer == "HTTP 500")
    assert "s3cr3t-token" not in caplog.text and "/services/" not in caplog.text


def test_requests_the_engine_defers_for_other_reasons_open_no_alert(readings):
    saturated, _ = readings
    # The same queue, but reported as deferred (say, compiling grammars), not waiting for room.
    deferred = [dataclasses.replace(r, snapshot=dataclasses.replace(r.snapshot, waiting_capacity=0.0))
                for r in saturated]
    for t in range(0, 70, 2):
        observe(deferred, 1000.0 + t)
    assert not SaturationAlert.objects.exists()
