"""The portal's settings as a fresh process loads them, from an environment of the test's choosing
(with none of the suite's own)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.gateway_process import ROOT

# What the suite's own environment may set, left out so the fresh process sees only what the test gives.
OURS = ("SECRET_KEY", "SECRET_KEY_FILE", "SECRET_KEY_FALLBACKS", "DEBUG", "SECURE_HSTS_SECONDS",
        "SECURE_PROXY_SSL_HEADER")


def load_settings(expression: str, **env: str) -> subprocess.CompletedProcess[str]:
    """gpuportal.settings loaded in a fresh process with `env` (and none of the suite's own)."""
    clean = {k: v for k, v in os.environ.items() if k not in OURS}
    return subprocess.run(
        [sys.executable, "-c", f"from django.conf import settings; print(repr({expression}))"],
        cwd=ROOT, env={**clean, "DJANGO_SETTINGS_MODULE": "gpuportal.settings", **env},
        capture_output=True, text=True, timeout=60,
    )
