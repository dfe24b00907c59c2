"""The portal's settings for the test suite and the type checker, with a secret key of their own.

gpuportal.settings refuses to start without SECRET_KEY unless DEBUG is on. The key is put in the
environment before those settings load, so the gateways, workers and commands the tests start
as child processes (DJANGO_SETTINGS_MODULE=gpuportal.settings) inherit it too.
"""

import os

os.environ.setdefault("SECRET_KEY", "gpuportal-tests-only-" + "x" * 40)

from gpuportal.settings import *  # noqa: E402, F403
