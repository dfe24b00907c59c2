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

# Passwords are made the production way at one iteration (tests/support/hashers.py). Django finds
# a hasher by the algorithm a hash names and reads the iterations from the hash, so this one also
# checks any password a gateway the suite started has upgraded to production's count.
PASSWORD_HASHERS = ["tests.support.hashers.OneIterationPBKDF2PasswordHasher"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["OPTIONS"]["init_command"] = "PRAGMA synchronous=OFF"  # noqa: F405
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.support.postgresql"  # noqa: F405
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"  # noqa: F405
