"""Production settings: no start without a secret key, HTTPS settings from the environment, a
Content-Security-Policy on every page, and the API docs served from our own static files."""

from __future__ import annotations

import os
import re

import pytest
from django.conf import settings
from django.test import Client

from fairness.demo.secret_key import ensure_demo_secret_key
from tests.support.settings_process import load_settings


def test_production_refuses_to_start_without_a_secret_key():
    child = load_settings("settings.SECRET_KEY")
    assert child.returncode != 0
    assert "ImproperlyConfigured" in child.stderr
    assert "SECRET_KEY" in child.stderr and "SECRET_KEY_FILE" in child.stderr


def test_an_old_key_from_the_environment_is_kept_as_a_fallback_when_the_key_is_rotated(tmp_path):
    old_keys = tmp_path / "old-keys"
    old_keys.write_text("the key before last,the last key\n")
    child = load_settings("settings.SECRET_KEY_FALLBACKS", SECRET_KEY="the new key",
                          SECRET_KEY_FALLBACKS_FILE=str(old_keys))
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == repr(["the key before last", "the last key"])
    assert load_settings("settings.SECRET_KEY_FALLBACKS", SECRET_KEY="k").stdout.strip() == "[]"


def test_a_key_from_a_file_or_debug_lets_it_start(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("from-a-file\n")
    assert load_settings("settings.SECRET_KEY", SECRET_KEY_FILE=str(key_file)).stdout.strip() == "'from-a-file'"
    assert "insecure-development" in load_settings("settings.SECRET_KEY", DEBUG="true").stdout


def test_the_demo_makes_its_key_once_and_reuses_it(tmp_path, monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("SECRET_KEY_FILE", raising=False)
    ensure_demo_secret_key(["manage.py", "demo"], tmp_path / "var")
    path = tmp_path / "var" / "demo_secret_key"
    assert os.environ["SECRET_KEY_FILE"] == str(path)
    first = path.read_text()
    assert len(first.strip()) >= 50 and path.stat().st_mode & 0o077 == 0
    monkeypatch.delenv("SECRET_KEY_FILE")
    ensure_demo_secret_key(["manage.py", "demo"], tmp_path / "var")
    assert path.read_text() == first
    monkeypatch.delenv("SECRET_KEY_FILE")
    ensure_demo_secret_key(["manage.py", "issue_key"], tmp_path / "var")  # the demo's database
    assert os.environ["SECRET_KEY_FILE"] == str(path)
    monkeypatch.delenv("SECRET_KEY_FILE")
    ensure_demo_secret_key(["manage.py", "migrate"], tmp_path / "elsewhere")  # no demo: no key made up
    assert "SECRET_KEY_FILE" not in os.environ and not (tmp_path / "elsewhere").exists()


def test_https_settings_come_from_the_environment():
    default = load_settings("(settings.SECURE_HSTS_SECONDS, hasattr(settings, 'SECURE_PROXY_SSL_HEADER') "
                            "and settings.SECURE_PROXY_SSL_HEADER)", SECRET_KEY="k")
    assert default.stdout.strip() == "(0, None)"
    behind_proxy = load_settings("(settings.SECURE_HSTS_SECONDS, settings.SECURE_PROXY_SSL_HEADER)", SECRET_KEY="k",
                                 SECURE_HSTS_SECONDS="31536000", SECURE_PROXY_SSL_HEADER="true")
    assert behind_proxy.stdout.strip() == "(31536000, ('HTTP_X_FORWARDED_PROTO', 'https'))"
    assert settings.SESSION_COOKIE_HTTPONLY


@pytest.mark.parametrize("path", ["/capacity/", "/accounts/login/", "/api/docs", "/api/capacity"])
def test_every_page_carries_the_content_security_policy(path, tiers, redis_url):
    response = Client().get(path)
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "default-src 'self'" in policy and "object-src 'none'" in policy


ASSET = re.compile(r'<(?:script|link)\b[^>]*?(?:src|href)="([^"]+)"')


def test_the_api_docs_load_swagger_from_our_own_static_files(db):
    client = Client()
    page = client.get("/api/docs").content.decode()
    assets = ASSET.findall(page)
    assert any(a.endswith("swagger-ui-bundle.js") for a in assets), page
    assert any(a.endswith("swagger-ui.css") for a in assets), page
    for asset in assets:
        assert asset.startswith(settings.STATIC_URL), asset  # same origin: no CDN
        response = client.get(asset)
        assert response.status_code == 200, asset
