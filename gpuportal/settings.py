"""Settings come from the environment; every default runs a fresh checkout."""

import os
import zoneinfo
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envstr(name: str, default: str) -> str:
    """A string from NAME, or from the file named by NAME_FILE (for secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false)")


def envint(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def envfloat(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None


def envlist(name: str, default: str) -> list[str]:
    return [part.strip() for part in envstr(name, default).split(",") if part.strip()]


DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        # The development key below is public: anyone could forge sessions signed with it.
        raise ImproperlyConfigured(
            "Set SECRET_KEY (or SECRET_KEY_FILE, a file holding it), e.g. from "
            "`openssl rand -hex 32`; only DEBUG=true runs with the public development key."
        )
    SECRET_KEY = "gpuportal-insecure-development-key-change-me"
# Rotating SECRET_KEY the Django way: the old key here (or in SECRET_KEY_FALLBACKS_FILE) keeps
# sessions, signed links and front ends' sealed JWT secrets readable until they are renewed.
SECRET_KEY_FALLBACKS = envlist("SECRET_KEY_FALLBACKS", "")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Listed so /api/docs serves Swagger UI from ninja's own static files, not from a CDN.
    "ninja",
    "fairness",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "fairness.portal.middleware.content_security_policy",
    "fairness.portal.middleware.refuse_nul",
    "fairness.portal.middleware.DatabaseUnavailable",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gpuportal.urls"
ASGI_APPLICATION = "gpuportal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # The pages' template tags live with the pages, not at the app's root.
            "libraries": {
                "figures": "fairness.portal.templatetags.figures",
                "nav": "fairness.portal.templatetags.nav",
            },
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'gpuportal.sqlite3'}"),
        conn_max_age=envint("DB_CONN_MAX_AGE", 0),
        # A kept connection the database dropped (a restart, a failover) is found dead before a
        # query is sent on it, and made again, without restarting the process.
        conn_health_checks=True,
    )
}
# A request never waits longer than this for a database that does not answer (a host gone from
# the network sends no refusal): it gets its 503 and the next one tries again. libpq counts less
# than 2 s as 2.
GP_DATABASE_CONNECT_TIMEOUT = envint("GP_DATABASE_CONNECT_TIMEOUT", 3)
if GP_DATABASE_CONNECT_TIMEOUT < 1:
    raise ImproperlyConfigured("GP_DATABASE_CONNECT_TIMEOUT must be at least 1 (seconds).")
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"].setdefault("OPTIONS", {})["connect_timeout"] = GP_DATABASE_CONNECT_TIMEOUT
# The password apart from the URL, so it can come from a file (a Docker secret) like the others.
if envstr("DATABASE_PASSWORD", ""):
    DATABASES["default"]["PASSWORD"] = envstr("DATABASE_PASSWORD", "")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    (BASE_DIR / "var").mkdir(exist_ok=True)
    # Several processes (gateway, worker, tests) share one file: wait for locks.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
    # A file (not memory) so the gateway processes a test starts can share it; one per test
    # run so two runs in one checkout do not trample each other.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / f"test-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/capacity/"
GP_SIGNIN_FAILURES_ALLOWED = envint("GP_SIGNIN_FAILURES_ALLOWED", 5)
GP_SIGNIN_LOCKOUT_SECONDS = envint("GP_SIGNIN_LOCKOUT_SECONDS", 600)

# Sign-in with the institution's OpenID provider (docs/signin.md); no issuer: no SSO button.
# The endpoints come from the issuer's discovery document, fetched at the first SSO sign-in, not
# here: a provider that is down must not stop the portal from starting (fairness/portal/signin/oidc_backend.py).
GP_OIDC_ISSUER = envstr("GP_OIDC_ISSUER", "")
GP_OIDC_CLIENT_ID = envstr("GP_OIDC_CLIENT_ID", "")
GP_OIDC_CLIENT_SECRET = envstr("GP_OIDC_CLIENT_SECRET", "")
GP_OIDC_SCOPES = envstr("GP_OIDC_SCOPES", "openid email profile")
GP_OIDC_USERNAME_CLAIM = envstr("GP_OIDC_USERNAME_CLAIM", "preferred_username")
GP_OIDC_GROUPS_CLAIM = envstr("GP_OIDC_GROUPS_CLAIM", "groups")
GP_OIDC_TIMEOUT_SECONDS = envfloat("GP_OIDC_TIMEOUT_SECONDS", 10.0)
if GP_OIDC_ISSUER and not GP_OIDC_CLIENT_ID:
    raise ImproperlyConfigured("GP_OIDC_ISSUER is set but GP_OIDC_CLIENT_ID is not.")
# Who may sign in with a password: "all", or "staff" (researchers then use the SSO button only).
# There is no "off": staff need a way in while the identity provider is down.
GP_LOCAL_SIGNIN = envstr("GP_LOCAL_SIGNIN", "all").strip().lower()
if GP_LOCAL_SIGNIN not in ("all", "staff"):
    raise ImproperlyConfigured(f"GP_LOCAL_SIGNIN={GP_LOCAL_SIGNIN!r}: use all or staff")
# Sign-in with the institution's LDAP directory, on the password form (docs/signin.md, "Sign in with LDAP";
# fairness/portal/signin/ldap_backend.py). Nothing is fetched here: a directory that is down must not stop
# the portal from starting.
GP_LDAP_SERVER_URI = envstr("GP_LDAP_SERVER_URI", "").strip()
GP_LDAP_BIND_DN = envstr("GP_LDAP_BIND_DN", "")
GP_LDAP_BIND_PASSWORD = envstr("GP_LDAP_BIND_PASSWORD", "")
GP_LDAP_USER_SEARCH_BASE = envstr("GP_LDAP_USER_SEARCH_BASE", "")
GP_LDAP_USER_FILTER = envstr("GP_LDAP_USER_FILTER", "(uid=%(user)s)")
GP_LDAP_GROUP_SEARCH_BASE = envstr("GP_LDAP_GROUP_SEARCH_BASE", "")
GP_LDAP_GROUP_TYPE = envstr("GP_LDAP_GROUP_TYPE", "groupOfNames").strip()
GP_LDAP_START_TLS = envbool("GP_LDAP_START_TLS", False)
GP_LDAP_TIMEOUT_SECONDS = envfloat("GP_LDAP_TIMEOUT_SECONDS", 10.0)
GP_LDAP_SYNC_SECONDS = envfloat("GP_LDAP_SYNC_SECONDS", 3600.0)
if GP_LDAP_SERVER_URI:
    if not GP_LDAP_SERVER_URI.startswith(("ldap://", "ldaps://")):
        raise ImproperlyConfigured(f"GP_LDAP_SERVER_URI={GP_LDAP_SERVER_URI!r}: use ldap://host[:port] or ldaps://…")
    if not GP_LDAP_USER_SEARCH_BASE.strip():
        raise ImproperlyConfigured("GP_LDAP_SERVER_URI is set but GP_LDAP_USER_SEARCH_BASE is not.")
    if not GP_LDAP_GROUP_SEARCH_BASE.strip():
        raise ImproperlyConfigured("GP_LDAP_SERVER_URI is set but GP_LDAP_GROUP_SEARCH_BASE is not: without "
                                   "groups nobody has access.")
    if "%(user)s" not in GP_LDAP_USER_FILTER:
        raise ImproperlyConfigured(f"GP_LDAP_USER_FILTER={GP_LDAP_USER_FILTER!r} must contain %(user)s, "
                                   "e.g. (uid=%(user)s)")
    if GP_LDAP_BIND_PASSWORD and not GP_LDAP_BIND_DN:
        raise ImproperlyConfigured("GP_LDAP_BIND_PASSWORD is set but GP_LDAP_BIND_DN is not.")
    if GP_LDAP_START_TLS and GP_LDAP_SERVER_URI.startswith("ldaps://"):
        raise ImproperlyConfigured("GP_LDAP_START_TLS is for ldap:// addresses: ldaps:// is encrypted already.")
if GP_LDAP_GROUP_TYPE not in ("groupOfNames", "posixGroup"):
    raise ImproperlyConfigured(f"GP_LDAP_GROUP_TYPE={GP_LDAP_GROUP_TYPE!r}: use groupOfNames or posixGroup")
if GP_LDAP_TIMEOUT_SECONDS <= 0 or GP_LDAP_SYNC_SECONDS <= 0:
    raise ImproperlyConfigured("GP_LDAP_TIMEOUT_SECONDS and GP_LDAP_SYNC_SECONDS must be more than 0.")
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
if GP_OIDC_ISSUER:
    AUTHENTICATION_BACKENDS.append("fairness.portal.signin.oidc_backend.SsoBackend")
if GP_LDAP_SERVER_URI:
    # After the local accounts: a local password signs its account in without asking the directory.
    AUTHENTICATION_BACKENDS.append("fairness.portal.signin.ldap_backend.DirectoryBackend")
# mozilla-django-oidc's own settings, from ours. PKCE on top of state and nonce; the ID token's
# signature is checked against the provider's JWKS (RS256, what Keycloak and Entra ID sign with).
OIDC_RP_CLIENT_ID = GP_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = GP_OIDC_CLIENT_SECRET
OIDC_RP_SCOPES = GP_OIDC_SCOPES
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_TIMEOUT = GP_OIDC_TIMEOUT_SECONDS
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"

LANGUAGE_CODE = "en-us"
# The portal's time zone: budgets' days, weeks and months begin at its midnight.
TIME_ZONE = envstr("TIME_ZONE", "UTC")
try:
    zoneinfo.ZoneInfo(TIME_ZONE)
except (zoneinfo.ZoneInfoNotFoundError, ValueError):
    raise ImproperlyConfigured(f"TIME_ZONE: unknown time zone {TIME_ZONE!r} (e.g. Europe/Berlin)") from None
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(envstr("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# collectstatic fills it (`make demo`, the Dockerfile and the tests run it); made empty here so
# WhiteNoise, which scans it at start-up, does not warn on a fresh checkout.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Hashed names (cached for a year) and gzip copies, made by collectstatic: a first visit of the
# capacity page transfers about a tenth of what the plain files weighed. See static_storage.py.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "gpuportal.static_storage.StaticStorage"},
    # Batch files (/v1/files, fairness/batch/): a local directory by default; an S3-compatible
    # store is this entry's BACKEND and OPTIONS (e.g. django-storages' S3Storage) instead.
    "batch_files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": envstr("GP_BATCH_FILES_DIR", str(BASE_DIR / "var" / "batch-files"))},
    },
}
# Plotly.js (its basic bundle, vendored in static/vendor) is served by us: the box may be
# offline, so no CDN.
STATICFILES_DIRS = [BASE_DIR / "static"]
# WhiteNoise serves straight from the finders too, so the gateway serves the pages' assets
# without a collectstatic step.
WHITENOISE_USE_FINDERS = True

# Behind HTTPS (SECURITY.md): cookies only over it, HSTS, and the proxy's word on the scheme.
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", False)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
# Only behind a proxy that sets X-Forwarded-Proto itself (and strips a client's): anyone who can
# reach the portal directly could otherwise claim HTTPS.
if envbool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Scripts and styles from our own static files only: no inline script anywhere, no CDN. Styles
# allow 'unsafe-inline' because Plotly and Swagger UI set style attributes on what they draw.
GP_CONTENT_SECURITY_POLICY = envstr(
    "GP_CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)

REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
# Redis behind Sentinel (fairness/store/redis_sentinel.py): the sentinels (host:port, ...) and the
# master group's name. REDIS_URL then gives only the database, the credentials and TLS.
REDIS_SENTINEL_MASTER = envstr("REDIS_SENTINEL_MASTER", "").strip()
REDIS_SENTINELS: list[tuple[str, int]] = []
for _sentinel in envlist("REDIS_SENTINELS", ""):
    _host, _, _port = _sentinel.rpartition(":")
    if not _host.strip("[]") or not _port.isdigit() or not 0 < int(_port) < 65536:
        raise ImproperlyConfigured(f"REDIS_SENTINELS: {_sentinel!r} is not host:port")
    REDIS_SENTINELS.append((_host.strip("[]"), int(_port)))
if bool(REDIS_SENTINELS) != bool(REDIS_SENTINEL_MASTER):
    raise ImproperlyConfigured("Set REDIS_SENTINELS and REDIS_SENTINEL_MASTER together (or neither).")
if REDIS_URL.startswith("unix://") and REDIS_SENTINELS:
    raise ImproperlyConfigured("REDIS_URL names a unix socket: Sentinel needs a redis:// or rediss:// URL.")
CACHES: dict[str, dict[str, object]] = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
}
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", REDIS_URL)
if REDIS_SENTINELS:
    CACHES["default"]["OPTIONS"] = {"pool_class": "fairness.store.redis_sentinel.CachePool"}
    if not envstr("CELERY_BROKER_URL", ""):  # Celery's broker is the portal's Redis: follow it too
        from fairness.store.redis_sentinel import broker_url as _broker_url

        CELERY_BROKER_URL = _broker_url(REDIS_URL, REDIS_SENTINELS)
        CELERY_BROKER_TRANSPORT_OPTIONS = {"master_name": REDIS_SENTINEL_MASTER}
        if REDIS_URL.startswith("rediss://"):
            CELERY_BROKER_USE_SSL = {"ssl_cert_reqs": "required"}
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "flush-usage": {"task": "fairness.flush_usage", "schedule": envfloat("GP_USAGE_FLUSH_SECONDS", 2.0)},
    "poll-engines": {"task": "fairness.poll_engines", "schedule": envfloat("GP_POLL_SECONDS", 2.0)},
    "compact-samples": {"task": "fairness.compact_samples", "schedule": 300.0},
    "prune-usage": {"task": "fairness.prune_usage", "schedule": 3600.0},
    "check-budgets": {"task": "fairness.check_budgets", "schedule": envfloat("GP_BUDGET_CHECK_SECONDS", 30.0)},
    "save-fair-share-usage": {
        "task": "fairness.save_fair_share_usage",
        "schedule": envfloat("GP_FAIRSHARE_SAVE_SECONDS", 60.0),
    },
    # One e-mail per key a week before it expires (fairness/accounting/key_expiry.py).
    "notify-expiring-keys": {"task": "fairness.notify_expiring_keys", "schedule": 3600.0},
}
# The directory's people: those gone deactivated, the rest's groups followed (fairness/portal/signin/ldap_sync.py).
# The task lives with the portal (it acts as the sign-in does), so the worker imports it by name.
CELERY_IMPORTS = ["fairness.portal.signin.ldap_sync", "fairness.batch.tasks"]
if GP_LDAP_SERVER_URI:
    CELERY_BEAT_SCHEDULE["sync-ldap-users"] = {"task": "fairness.sync_ldap_users", "schedule": GP_LDAP_SYNC_SECONDS}

# Researchers' own keys on /me/keys/ (fairness/actions/self_service.py): live keys one person may
# hold before they must revoke one to make another (keys staff issue count too).
GP_MAX_KEYS_PER_USER = envint("GP_MAX_KEYS_PER_USER", 5)
# Batch files (/v1/files, fairness/batch/): the largest one uploaded (413 beyond, the upload
# streamed to storage, never held in memory), and how many one person may keep.
GP_MAX_BATCH_FILE_BYTES = envint("GP_MAX_BATCH_FILE_BYTES", 200 * 1024 * 1024)
GP_MAX_BATCH_FILES_PER_USER = envint("GP_MAX_BATCH_FILES_PER_USER", 100)
# Batches (/v1/batches, fairness/batch/runner.py): how many lines one may hold, how many unfinished
# ones one person may have; a runner starts every GP_BATCH_POLL_SECONDS on the "batches" queue,
# runs for up to GP_BATCH_SLICE_SECONDS, and a batch whose runner has not said it is alive for
# GP_BATCH_CLAIM_SECONDS is taken over by another (its runner died).
GP_MAX_BATCH_LINES = envint("GP_MAX_BATCH_LINES", 50_000)
GP_MAX_UNFINISHED_BATCHES_PER_USER = envint("GP_MAX_UNFINISHED_BATCHES_PER_USER", 10)
GP_BATCH_POLL_SECONDS = envfloat("GP_BATCH_POLL_SECONDS", 5.0)
GP_BATCH_SLICE_SECONDS = envfloat("GP_BATCH_SLICE_SECONDS", 300.0)
GP_BATCH_CLAIM_SECONDS = envfloat("GP_BATCH_CLAIM_SECONDS", 30.0)
# How often a running batch's key is read again: how soon a revoked key or a deactivated owner
# stops its batch (the lines already at the engine finish).
GP_BATCH_KEY_CHECK_SECONDS = envfloat("GP_BATCH_KEY_CHECK_SECONDS", 10.0)
CELERY_TASK_ROUTES = {"fairness.run_batches": {"queue": "batches"}}
CELERY_BEAT_SCHEDULE["run-batches"] = {
    "task": "fairness.run_batches", "schedule": GP_BATCH_POLL_SECONDS, "options": {"expires": GP_BATCH_POLL_SECONDS},
}
if GP_MAX_BATCH_FILE_BYTES < 1 or GP_MAX_BATCH_FILES_PER_USER < 1:
    raise ImproperlyConfigured("GP_MAX_BATCH_FILE_BYTES and GP_MAX_BATCH_FILES_PER_USER must be at least 1.")
# What the batch lane keeps (fairness/batch/storage_quota.py, retention.py): one person's files,
# uploads and batch results together, in bytes (an upload past it is refused before it is stored,
# and no batch starts while it is full); files unused for GP_FILE_RETENTION_DAYS, and batches
# ended that long ago, are deleted by an hourly task.
GP_STORAGE_QUOTA_BYTES_PER_USER = envint("GP_STORAGE_QUOTA_BYTES_PER_USER", 2 * 1024 * 1024 * 1024)
GP_FILE_RETENTION_DAYS = envfloat("GP_FILE_RETENTION_DAYS", 30.0)
CELERY_BEAT_SCHEDULE["prune-batch-storage"] = {"task": "fairness.prune_batch_storage", "schedule": 3600.0}
if GP_STORAGE_QUOTA_BYTES_PER_USER < 1 or GP_FILE_RETENTION_DAYS <= 0:
    raise ImproperlyConfigured("GP_STORAGE_QUOTA_BYTES_PER_USER must be at least 1, GP_FILE_RETENTION_DAYS above 0.")

# The gateway
GP_MAX_BODY_BYTES = envint("GP_MAX_BODY_BYTES", 4 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = GP_MAX_BODY_BYTES
# The longest line a batch file may hold (fairness/batch/jsonl_check.py refuses a longer one at
# upload, intake fails it): a request at GP_MAX_BODY_BYTES, with its custom_id and url and the
# spaces a JSON writer adds. OpenAI states no limit per line, only 200 MB and 50,000 lines a file.
GP_BATCH_MAX_LINE_BYTES = envint("GP_BATCH_MAX_LINE_BYTES", 2 * GP_MAX_BODY_BYTES)
if GP_BATCH_MAX_LINE_BYTES < 1:
    raise ImproperlyConfigured("GP_BATCH_MAX_LINE_BYTES must be at least 1.")
# Request bodies to the pages (everything outside /v1/) above this get 413 before Django reads
# them (gpuportal/asgi.py): Django would spool any size to a temporary file first. No page or
# admin API call sends more than a few KiB.
GP_MAX_PAGE_BODY_BYTES = envint("GP_MAX_PAGE_BODY_BYTES", 2 * 1024 * 1024)
GP_UPSTREAM_CONNECT_TIMEOUT = envfloat("GP_UPSTREAM_CONNECT_TIMEOUT", 5.0)
GP_UPSTREAM_READ_TIMEOUT = envfloat("GP_UPSTREAM_READ_TIMEOUT", 300.0)
# A non-streaming engine answer read whole is refused (502) beyond this; streams are relayed
# piece by piece and never held whole.
GP_MAX_ENGINE_RESPONSE_BYTES = envint("GP_MAX_ENGINE_RESPONSE_BYTES", 64 * 1024 * 1024)
# Slow or silent clients: a request's headers must arrive within the header timeout of the
# connection opening (or of the request's first byte), and at most GP_CLIENT_MAX_HEADER_BYTES of them
# (431 beyond; fairness/gateway/http_server.py); a /v1 body must arrive whole within the body
# timeout of its key being checked (408 beyond).
GP_CLIENT_HEADER_TIMEOUT_SECONDS = envfloat("GP_CLIENT_HEADER_TIMEOUT_SECONDS", 10.0)
# An idle keep-alive connection (a response ended, nothing of the next request yet) is closed after
# this. Longer than clients keep theirs (httpx 5 s, aiohttp 15 s, nginx's upstream and AWS ALB 60 s),
# so the client always drops it first: closing at the moment a client reuses it loses that request
# (a chaos run with equal timeouts lost one of 450). The waiting-connection caps bound idle ones.
GP_CLIENT_IDLE_TIMEOUT_SECONDS = envint("GP_CLIENT_IDLE_TIMEOUT_SECONDS", 75)
GP_CLIENT_MAX_HEADER_BYTES = envint("GP_CLIENT_MAX_HEADER_BYTES", 64 * 1024)
GP_CLIENT_BODY_TIMEOUT_SECONDS = envfloat("GP_CLIENT_BODY_TIMEOUT_SECONDS", 30.0)
# Any body, to any route, must arrive whole within the grace plus one second for each
# GP_CLIENT_MIN_BODY_BYTES_PER_SECOND received (408 beyond): a 200 MiB upload may take 56 hours.
GP_CLIENT_BODY_GRACE_SECONDS = envfloat("GP_CLIENT_BODY_GRACE_SECONDS", 10.0)
GP_CLIENT_MIN_BODY_BYTES_PER_SECOND = envfloat("GP_CLIENT_MIN_BODY_BYTES_PER_SECOND", 1024.0)
# Connections waiting on their client (headers or body not yet whole, or idle between requests),
# per client address and in all; past either the oldest is closed (fairness/gateway/waiting_clients.py).
GP_CLIENT_MAX_PENDING = envint("GP_CLIENT_MAX_PENDING", 1024)
GP_CLIENT_MAX_PENDING_PER_ADDRESS = envint("GP_CLIENT_MAX_PENDING_PER_ADDRESS", 256)
if GP_CLIENT_MIN_BODY_BYTES_PER_SECOND <= 0 or GP_CLIENT_MAX_PENDING < 1 or GP_CLIENT_MAX_PENDING_PER_ADDRESS < 1:
    raise ImproperlyConfigured("GP_CLIENT_MIN_BODY_BYTES_PER_SECOND must be above 0, GP_CLIENT_MAX_PENDING and "
                               "GP_CLIENT_MAX_PENDING_PER_ADDRESS at least 1.")
if GP_CLIENT_IDLE_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured("GP_CLIENT_IDLE_TIMEOUT_SECONDS must be a whole number of seconds above 0.")
GP_KEY_CACHE_SECONDS = envfloat("GP_KEY_CACHE_SECONDS", 60.0)
GP_AUTH_EPOCH_CHECK_SECONDS = envfloat("GP_AUTH_EPOCH_CHECK_SECONDS", 0.5)
GP_LEASE_TTL_SECONDS = envfloat("GP_LEASE_TTL_SECONDS", 30.0)
# After SIGTERM, how long requests in flight may run on before they are cut off (a rolling
# restart loses no request shorter than this).
GP_SHUTDOWN_GRACE_SECONDS = envfloat("GP_SHUTDOWN_GRACE_SECONDS", 30.0)
# Engine slots a borrowing tier leaves free for others. Three keeps a small group's chats from
# ever waiting for a borrowed slot (bench/fairness.py: with 2, a third concurrent chat waited for a
# batch request to end about one time in twenty) at about a tenth of the batch job's throughput.
GP_RESERVE_SLOTS = envint("GP_RESERVE_SLOTS", 3)
# Requests waiting in admission's queue, all tiers and gateway processes together; one more gets
# 429 queue_full at once. Each one waiting holds its connection open in the worker serving it, and
# a worker serves 1024 at most (uvicorn's --limit-concurrency; 503 beyond): at 512, queued requests
# landing all on one worker still leave it half of that for those running and everyone else.
GP_MAX_QUEUED_TOTAL = envint("GP_MAX_QUEUED_TOTAL", 512)
if GP_MAX_QUEUED_TOTAL < 0:
    raise ImproperlyConfigured("GP_MAX_QUEUED_TOTAL must be at least 0.")
GP_ROUTING_EPSILON = envfloat("GP_ROUTING_EPSILON", 0.25)
# Below this share of a replica's slots the load bound is not applied (keep the prefix cache).
GP_ROUTING_BOUND_FLOOR = envfloat("GP_ROUTING_BOUND_FLOOR", 0.375)
GP_HEALTH_INTERVAL_SECONDS = envfloat("GP_HEALTH_INTERVAL_SECONDS", 2.0)
GP_HEALTH_TIMEOUT_SECONDS = envfloat("GP_HEALTH_TIMEOUT_SECONDS", 5.0)
GP_HEALTH_COOLDOWN_SECONDS = envfloat("GP_HEALTH_COOLDOWN_SECONDS", 10.0)
# Fair share (Slurm's classic factor F = 2^(-U/S)): a finished request charges its association
# GP_FAIRSHARE_WEIGHT_PROMPT x prompt tokens + GP_FAIRSHARE_WEIGHT_COMPLETION x completion tokens
# (VTC's weights: generating a token costs the card about twice reading one), and that usage
# halves every GP_FAIRSHARE_HALF_LIFE_HOURS (Slurm's usual week). Redis holds it; the database
# keeps a copy every GP_FAIRSHARE_SAVE_SECONDS, so a Redis restart loses at most that much.
GP_FAIRSHARE_HALF_LIFE_HOURS = envfloat("GP_FAIRSHARE_HALF_LIFE_HOURS", 168.0)
GP_FAIRSHARE_WEIGHT_PROMPT = envfloat("GP_FAIRSHARE_WEIGHT_PROMPT", 1.0)
GP_FAIRSHARE_WEIGHT_COMPLETION = envfloat("GP_FAIRSHARE_WEIGHT_COMPLETION", 2.0)
# A prompt token the engine found in its prefix cache (vLLM's usage.prompt_tokens_details
# .cached_tokens, reported when it runs with --enable-prompt-tokens-details) is charged this
# instead of the prompt weight: its prefill was skipped, and the KV blocks it holds are paid for
# by the completion's decode. A tenth, as the large hosted APIs charge for cached input. Budgets
# count with the same weights, so the charge stays one number.
GP_FAIRSHARE_WEIGHT_CACHED_PROMPT = envfloat("GP_FAIRSHARE_WEIGHT_CACHED_PROMPT", 0.1)
if not GP_FAIRSHARE_WEIGHT_CACHED_PROMPT >= 0:  # a negative weight would credit whoever hits the cache
    raise ImproperlyConfigured("GP_FAIRSHARE_WEIGHT_CACHED_PROMPT must be at least 0.")
# A budgeted request runs with its completion limit lowered to what its budgets leave; it is
# refused (429 budget_exceeded) only when fewer than GP_BUDGET_MIN_COMPLETION_TOKENS fit. One that
# names no limit is given at most GP_MODEL_CONTEXT_TOKENS less its prompt: the gateway does not
# ask the engine its context, and a limit past it would be refused there.
GP_BUDGET_MIN_COMPLETION_TOKENS = envint("GP_BUDGET_MIN_COMPLETION_TOKENS", 16)
GP_MODEL_CONTEXT_TOKENS = envint("GP_MODEL_CONTEXT_TOKENS", 4096)
# How long the gateway remembers which replica stored a Responses API response, and whose it is
# (gateway/stored_responses.py). The engine itself keeps it in memory until it restarts.
GP_STORED_RESPONSE_DAYS = envfloat("GP_STORED_RESPONSE_DAYS", 30.0)
if GP_STORED_RESPONSE_DAYS <= 0:
    raise ImproperlyConfigured("GP_STORED_RESPONSE_DAYS must be positive.")
# A streamed request still waiting for a slot after this long (ms) starts its stream and is told
# its place in line every second (gateway/queue_events.py), in tiers that have queue events on.
GP_QUEUE_EVENTS_AFTER_MS = envint("GP_QUEUE_EVENTS_AFTER_MS", 1000)
if GP_QUEUE_EVENTS_AFTER_MS < 0:
    raise ImproperlyConfigured("GP_QUEUE_EVENTS_AFTER_MS must be at least 0.")
# Empty: /metrics is open (keep it on the internal network); set: scrapes need this bearer token.
GP_METRICS_TOKEN = envstr("GP_METRICS_TOKEN", "")

# Usage events waiting in Redis for the flush task beyond this many are dropped, oldest first,
# and counted (gpuportal_usage_events_dropped_total, and an alert): without a worker the list
# would otherwise grow until Redis runs out of memory. About 0.5 KB each.
GP_USAGE_BACKLOG_MAX = envint("GP_USAGE_BACKLOG_MAX", 1_000_000)
# Usage events a gateway process keeps while Redis cannot take them, retried until it can; beyond
# this many the oldest are dropped and counted (gpuportal_usage_outbox_dropped_total).
GP_USAGE_OUTBOX_MAX = envint("GP_USAGE_OUTBOX_MAX", 100_000)
# How long a gateway process remembers the usage events Redis took, to push them again if Redis
# restarts empty before the flush task (every GP_USAGE_FLUSH_SECONDS) has drained them.
GP_USAGE_RETAIN_SECONDS = envfloat("GP_USAGE_RETAIN_SECONDS", 30.0)
# Usage: raw per-request records, and the hourly rows the pages read
GP_USAGE_RECORDS_DAYS = envfloat("GP_USAGE_RECORDS_DAYS", 30.0)
GP_USAGE_HOURLY_DAYS = envfloat("GP_USAGE_HOURLY_DAYS", 400.0)

# Telemetry, capacity and saturation alerts
GP_POLL_SECONDS = envfloat("GP_POLL_SECONDS", 2.0)
GP_POLL_TIMEOUT_SECONDS = envfloat("GP_POLL_TIMEOUT_SECONDS", 5.0)
GP_SAMPLES_RAW_HOURS = envfloat("GP_SAMPLES_RAW_HOURS", 1.0)
GP_SAMPLES_RETENTION_DAYS = envfloat("GP_SAMPLES_RETENTION_DAYS", 14.0)
GP_CAPACITY_WINDOW_MINUTES = envfloat("GP_CAPACITY_WINDOW_MINUTES", 60.0)
GP_SATURATION_RATIO = envfloat("GP_SATURATION_RATIO", 4.0)
GP_SATURATION_WINDOW_SECONDS = envfloat("GP_SATURATION_WINDOW_SECONDS", 60.0)
GP_KV_ALERT_THRESHOLD = envfloat("GP_KV_ALERT_THRESHOLD", 0.95)
GP_KV_ALERT_WINDOW_SECONDS = envfloat("GP_KV_ALERT_WINDOW_SECONDS", 120.0)
GP_ALERT_RESOLVE_SECONDS = envfloat("GP_ALERT_RESOLVE_SECONDS", 30.0)
GP_ALERT_WEBHOOK_URL = envstr("GP_ALERT_WEBHOOK_URL", "")
ADMINS = [("admin", email) for email in envlist("ADMINS", "")]
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
SERVER_EMAIL = envstr("SERVER_EMAIL", "gpuportal@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"refusals": {"()": "gpuportal.log_filters.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {
        "httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"},
        "django.request": {"filters": ["refusals"]},
    },
}
