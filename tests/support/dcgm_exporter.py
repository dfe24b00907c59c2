"""A stand-in for NVIDIA's DCGM exporter on loopback: its default counters for two GPUs, written
as dcgm-exporter writes them (HELP and TYPE lines, the gpu, UUID, pci_bus_id, device, modelName,
Hostname and driver labels), or whatever a test makes it answer instead."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (field, type, help) as in dcgm-exporter's etc/default-counters.csv.
COUNTERS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
]

GPUS = [
    {"gpu": "0", "UUID": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "pci_bus_id": "00000000:17:00.0",
     "device": "nvidia0"},
    {"gpu": "1", "UUID": "GPU-9bb57e8e-f94d-4b95-7c33-ee279c8fb75c", "pci_bus_id": "00000000:65:00.0",
     "device": "nvidia1"},
]

# Each GPU's values; the figures the portal shows follow from them (see EXPECTED).
VALUES = [
    {"DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_MEMORY_TEMP": 59,
     "DCGM_FI_DEV_GPU_TEMP": 64, "DCGM_FI_DEV_POWER_USAGE": 312.457, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
     8844715201, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0, "DCGM_FI_DEV_GPU_UTIL": 82, "DCGM_FI_DEV_MEM_COPY_UTIL": 41,
     "DCGM_FI_DEV_ENC_UTIL": 0, "DCGM_FI_DEV_DEC_UTIL": 0, "DCGM_FI_DEV_XID_ERRORS": 0,
     "DCGM_FI_DEV_FB_FREE": 9126, "DCGM_FI_DEV_FB_USED": 71954, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
     "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
     "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0},
    {"DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_MEMORY_TEMP": 61,
     "DCGM_FI_DEV_GPU_TEMP": 71, "DCGM_FI_DEV_POWER_USAGE": 287.543, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
     8512337790, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0, "DCGM_FI_DEV_GPU_UTIL": 60, "DCGM_FI_DEV_MEM_COPY_UTIL": 33,
     "DCGM_FI_DEV_ENC_UTIL": 0, "DCGM_FI_DEV_DEC_UTIL": 0, "DCGM_FI_DEV_XID_ERRORS": 0,
     "DCGM_FI_DEV_FB_FREE": 9126, "DCGM_FI_DEV_FB_USED": 71954, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
     "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
     "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0},
]

# What the two GPUs make for the replica: mean utilisation, sums, the hottest.
EXPECTED = {"gpus": 2, "utilization_percent": 71.0, "memory_used_mib": 143908.0, "memory_total_mib": 162160.0,
            "power_watts": 600.0, "temperature_c": 71.0}


def payload(values: list[dict[str, float]] | None = None) -> str:
    lines = []
    for name, kind, help_text in COUNTERS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for gpu, figures in zip(GPUS, values or VALUES, strict=True):
            labels = {**gpu, "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-07",
                      "DCGM_FI_DRIVER_VERSION": "550.54.15"}
            said = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines.append(f"{name}{{{said}}} {figures[name]}")
    return "\n".join(lines) + "\n"


class DcgmExporter:
    """Serves `body` at /metrics with `status`; `stall` holds the answer back for that many
    seconds (an exporter that hangs) unless the exporter is stopped first. Serving from the
    start; `with DcgmExporter() as exporter:` stops it."""

    def __init__(self) -> None:
        self.body: bytes = payload().encode()
        self.status = 200
        self.stall = 0.0
        self.requests = 0
        self._stopped = threading.Event()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 -- the name http.server calls
                exporter.requests += 1
                if exporter.stall:
                    exporter._stopped.wait(exporter.stall)
                found = self.path.startswith("/metrics")
                body = exporter.body if found else b"not found"
                self.send_response(exporter.status if found else 404)
                self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the poller gave up on it first
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    def __enter__(self) -> DcgmExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()

