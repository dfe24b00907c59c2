"""The portal's settings for the test suite and the type checker, with a secret key of their own.

gpuportal.settings refuses to start without SECRET_KEY unless DEBUG is on. The key is put in the
environment before those settings load, so the gateways, workers and commands the tests start
as child processes (DJANGO_SETTINGS_MODULE=gpuportal.settings) inherit it too.
"""

import os

os.environ.setdefault("SECRET_KEY", "gpuportal-tests-only-" + "x" * 40)
# A static root of the tests' own, which no collectstatic fills unless a test does (the page-weight
# test collects into one of its own): the pages then link the plain files, as edited, never a stale
# hashed copy a `make demo` left in staticfiles/.
os.environ.setdefault("STATIC_ROOT", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "var", "test-staticfiles"))

from gpuportal.settings import *  # noqa: E402, F403
