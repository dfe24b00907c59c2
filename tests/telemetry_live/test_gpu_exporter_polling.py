"""The poller reads a replica's DCGM exporter beside its engine: the figures reach the latest
reading, the samples, the capacity JSON and page; an exporter that misbehaves in any way leaves
no GPU figure and the engine's own poll as it was."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest
from django.test import Client
from django.utils import timezone

from fairness.models import EngineSample, Replica
from fairness.telemetry import polling
from fairness.telemetry.gpu_metrics import MAX_BYTES
from tests.support.cast import MODEL
from tests.support.dcgm_exporter import EXPECTED, DcgmExporter, payload
from tests.support.telemetry import poll, run

GPU_COLUMNS = ("gpu_util", "gpu_mem_used_mib", "gpu_mem_total_mib", "gpu_power_w", "gpu_temp_c", "gpu_count")


@pytest.fixture
def exporter() -> Iterator[DcgmExporter]:
    with DcgmExporter() as server:
        yield server


@pytest.fixture
def with_exporter(engine, exporter) -> Replica:
    replica = Replica.objects.get(name="sim-cap")
    replica.gpu_metrics_url = exporter.url
    replica.save(update_fields=["gpu_metrics_url"])
    return replica


def gpu_columns(sample: EngineSample) -> tuple:
    return tuple(getattr(sample, c) for c in GPU_COLUMNS)


def test_a_poll_stores_the_gpus_figures_beside_the_engines(with_exporter, exporter):
    reading = poll().readings[0]
    assert reading.healthy and reading.gpu is not None and reading.gpu.as_json() == EXPECTED
    assert exporter.requests == 1
    latest = run(polling.latest_readings)[0]
    assert latest["gpu"] == EXPECTED and latest["running"] == 0
    sample = EngineSample.objects.get()
    assert gpu_columns(sample) == (71.0, 143908.0, 162160.0, 600.0, 71.0, 2)


def test_the_capacity_json_and_page_show_the_gpus_only_for_a_replica_with_an_exporter(with_exporter, sim):
    Replica.objects.create(name="no-gpu", base_url=sim.url, model=MODEL, max_num_seqs=8)
    poll()
    replicas = {r["name"]: r for r in Client().get("/api/capacity").json()["replicas"]}
    assert replicas["sim-cap"]["gpu"] == EXPECTED
    assert replicas["no-gpu"]["gpu"] is None
    page = Client().get("/capacity/").content.decode()
    table = page[page.index('id="gpu-figures"'):page.index("</table>", page.index('id="gpu-figures"'))]
    assert " hidden" not in table.split(">", 1)[0]
    assert "sim-cap" in table and "no-gpu" not in table
    assert "71%" in table and "141 of 158 GiB" in table and "600 W" in table and "71 °C" in table
    assert "GPU-604ac76c" not in page and with_exporter.gpu_metrics_url not in page  # no address, no UUID


def test_with_no_exporter_anywhere_the_page_shows_no_gpu_table(engine):
    poll()
    assert Client().get("/api/capacity").json()["replicas"][0]["gpu"] is None
    page = Client().get("/capacity/").content.decode()
    assert '<div id="gpu-figures" hidden>' in page and '<tbody id="gpu-rows">' in page
    rows = page[page.index('<tbody id="gpu-rows">'):page.index("</tbody>", page.index('<tbody id="gpu-rows">'))]
    assert "<tr" not in rows


HOSTILE = {
    "huge": lambda e: setattr(e, "body", (payload() + "# padding\n" * (MAX_BYTES // 10 + 1)).encode()),
    "garbage": lambda e: setattr(e, "body", b"<html>\x00\xff{{ not metrics }}</html>"),
    "nan": lambda e: setattr(e, "body", payload().replace(" 82\n", " NaN\n").replace(" 60\n", " NaN\n")
                             .replace(" 64\n", " NaN\n").replace(" 71\n", " -4\n").replace(" 312.457", " NaN")
                             .replace(" 287.543", " 1e30").replace(" 71954", " NaN").replace(" 9126", " -1")
                             .encode()),
    "error": lambda e: setattr(e, "status", 500),
    "timeout": lambda e: setattr(e, "stall", 30.0),
}


@pytest.mark.parametrize("how", HOSTILE)
def test_a_hostile_exporter_stores_nothing_gpu_related_and_leaves_the_engine_poll_alone(
    with_exporter, exporter, settings, how,
):
    settings.GP_POLL_TIMEOUT_SECONDS = 1.0
    HOSTILE[how](exporter)
    reading = poll().readings[0]
    assert reading.healthy and reading.snapshot is not None and reading.error == ""
    assert reading.gpu is None
    assert run(polling.latest_readings)[0]["gpu"] is None
    sample = EngineSample.objects.get()
    assert sample.healthy and gpu_columns(sample) == (None,) * 6
    assert exporter.requests >= 1  # it was asked, and its answer refused


def test_a_replica_whose_exporter_is_unreachable_still_polls(engine):
    replica = Replica.objects.get(name="sim-cap")
    replica.gpu_metrics_url = "http://127.0.0.1:9/metrics"  # discard: nothing listens
    replica.save(update_fields=["gpu_metrics_url"])
    reading = poll().readings[0]
    assert reading.healthy and reading.gpu is None


def test_compaction_averages_the_gpu_figures_with_the_rest(with_exporter, exporter):
    poll()
    exporter.body = payload().replace(" 82\n", " 42\n").replace(" 60\n", " 20\n").encode()  # mean 31
    poll()
    now = timezone.now()
    EngineSample.objects.update(taken_at=now - dt.timedelta(hours=2))
    assert polling.compact_samples(now, raw_for=dt.timedelta(hours=1), keep_for=dt.timedelta(days=1)) == 2
    compacted = EngineSample.objects.get()
    assert compacted.resolution_seconds == 60
    assert (compacted.gpu_util, compacted.gpu_count, compacted.gpu_power_w) == (51.0, 2, 600.0)


def test_the_latest_reading_holds_no_exporter_address(with_exporter):
    poll()
    assert with_exporter.gpu_metrics_url not in json.dumps(run(polling.latest_readings))
