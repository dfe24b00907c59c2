#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuportal.settings")
    from pathlib import Path

    from fairness.demo.secret_key import ensure_demo_secret_key

    ensure_demo_secret_key(sys.argv, Path(__file__).resolve().parent / "var")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
