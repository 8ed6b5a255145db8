"""One settings module, read from the environment.

With nothing set it is the embedded demo: SQLite, the in-memory channel layer, an
in-process worker and the offline scripted model. Setting DATABASE_URL, REDIS_URL and
OPENAI_API_KEY switches to the production parts. A malformed value raises
ImproperlyConfigured naming the variable; production secrets have no default.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


def env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ImproperlyConfigured(f"{name} must be more than 0 seconds, got {raw!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


def _pin_synchronous_commit(options: dict[str, str]) -> dict[str, str]:
    # Every connection of the portal tells a person something was recorded (a decision,
    # a started thread, a pause), so its commits must wait for the disk whatever a role or
    # database default says. A startup option costs no round trip; placed last, it wins
    # over an `options` given in the URL.
    pin = "-c synchronous_commit=on"
    options["options"] = f"{options['options']} {pin}" if options.get("options") else pin
    return options


# SQLite as the demo's worker, notifier and web threads share it: write-ahead logging lets
# them read while one writes, a transaction takes the write lock when it begins (none
# upgrades a read lock mid-way, which SQLite refuses at once as "database is locked"),
# and a writer waits up to 20 s for another. Durability stays synchronous=FULL.
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL;",
}


def database_from_url(url: str, *, name: str = "DATABASE_URL") -> dict[str, object]:
    """A DATABASES entry from postgres://user:pass@host:port/db?opt=v or sqlite:///path."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        db = unquote(parts.path.lstrip("/"))
        if not db:
            raise ImproperlyConfigured(f"{name} names no database: add /<dbname> to {url!r}")
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name} has a bad port in {url!r}") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": db,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 0,
            "OPTIONS": _pin_synchronous_commit(dict(parse_qsl(parts.query))),
            "TEST": {"NAME": f"test_{db}"},
        }
    if parts.scheme == "sqlite":
        # sqlite:///rel.db is relative to the working directory, sqlite:////abs.db absolute.
        path = parts.path[1:]
        if not path:
            raise ImproperlyConfigured(f"{name} names no SQLite file: use sqlite:///path/to.db")
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path, "OPTIONS": SQLITE_OPTIONS}
    raise ImproperlyConfigured(
        f"{name} must start with postgres:// or sqlite://, got {parts.scheme or url!r}"
    )


DEBUG = env_bool("DEBUG", True)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-demo-key-only-for-debug-" + "x" * 32
elif len(SECRET_KEY) < 50 and not DEBUG:
    raise ImproperlyConfigured("SECRET_KEY must be at least 50 characters when DEBUG is off")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if "://" not in _origin:
        raise ImproperlyConfigured(
            f"CSRF_TRUSTED_ORIGINS entries need a scheme (https://host), got {_origin!r}"
        )

# daphne's app only makes `runserver` serve ASGI (websockets too). Importing it loads
# Twisted, the largest part of a process's start, so only runserver loads it: the
# production servers, the workers and every other command start without it.
_RUNSERVER = sys.argv[1:2] == ["runserver"]

INSTALLED_APPS = [
    *(["daphne"] if _RUNSERVER else []),
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "channels",
    "axes",  # failed-login throttling (see "logins" below)
    "csp",  # the Content-Security-Policy header (see "headers" below)
    "ninja",  # serves the API docs' assets itself, so /api/docs needs no CDN
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # --- static files: with DEBUG off the app serves them itself (WhiteNoise), so daphne
    # alone serves whole pages; with DEBUG on, runserver serves them from the source
    # folders and there is no collected STATIC_ROOT for WhiteNoise to read ---
    *([] if DEBUG else ["whitenoise.middleware.WhiteNoiseMiddleware"]),
    # --- end static files ---
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # --- headers: Content-Security-Policy on every response, refusals included ---
    "csp.middleware.CSPMiddleware",
    # Before any view (and CSRF's view check) reads the body: see portal/inputs.py.
    "portal.inputs.refuse_bad_input",
    # Under /api/, a 404 or 405 answered as a page gets the API's JSON refusal body.
    "portal.api.errors.json_refusals",
    # --- logins: last, so it turns a lockout flagged during the view into its page ---
    "axes.middleware.AxesMiddleware",
]

# The API's own, shorter stack under ASGI (portal/api/stack.py): no sessions, messages,
# CSRF, clickjacking header, htmx or login lockouts, which a token-checked JSON request
# does not use, and each of which would cost it thread hand-offs.
API_MIDDLEWARE = [
    "portal.api.stack.SecurityHeaders",
    "portal.inputs.refuse_bad_input",
    "portal.api.errors.json_refusals",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = None

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
                "portal.web.context_processors.role_flags",
            ],
        },
    }
]

_database_url = os.environ.get("DATABASE_URL", "")
# Lets several test runs share one machine without sharing a test database.
_test_suffix = os.environ.get("TEST_DB_SUFFIX", "")
DATABASES = {
    "default": database_from_url(_database_url)
    if _database_url
    else {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / os.environ.get("SQLITE_PATH", "db.sqlite3"),
        "OPTIONS": SQLITE_OPTIONS,
        # A file, not :memory:, so worker subprocesses in tests see the same database.
        "TEST": {"NAME": str(BASE_DIR / f".test-db{_test_suffix}.sqlite3")},
    }
}
USING_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
if USING_POSTGRES and _test_suffix:
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}{_test_suffix}"}
# Web processes borrow connections from a pool of at most this many instead of opening one
# per request (0: no pool). Under ASGI a page's request runs its sync code in a thread
# started for it, so Django's persistent connections (CONN_MAX_AGE) would never be reused
# there. Workers keep one connection of their own instead (run_worker drops the pool).
PORTAL_DB_POOL_SIZE = env_int("PORTAL_DB_POOL_SIZE", 20)
if USING_POSTGRES and PORTAL_DB_POOL_SIZE:
    _options: dict[str, object] = DATABASES["default"]["OPTIONS"]  # type: ignore[assignment]
    _options["pool"] = {
        "min_size": min(2, PORTAL_DB_POOL_SIZE),
        "max_size": PORTAL_DB_POOL_SIZE,
        # Seconds a request waits for a free connection before it fails.
        "timeout": 10,
    }
    # With a pool, Django checks each connection as it is lent: one the server dropped
    # while it sat in the pool is replaced, not handed to a request.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True


def default_channel_prefix(db: dict[str, object], *, test_suffix: str = "") -> str:
    """A channel-layer prefix of this deployment's own: its database's name and a short
    hash of where that database lives (engine, host, port, name; the test suffix keeps
    parallel test runs apart too). Redis pub/sub ignores the database number in REDIS_URL,
    so two portals sharing a Redis server see each other's messages unless their channel
    names differ."""
    name = str(db["NAME"])
    where = f"{db['ENGINE']}:{db.get('HOST') or ''}:{db.get('PORT') or ''}/{name}{test_suffix}"
    readable = re.sub(r"[^A-Za-z0-9_-]", "-", Path(name).stem)[:24] or "portal"
    return f"{readable}-{hashlib.sha256(where.encode()).hexdigest()[:10]}."


# A channel name is the prefix, a fixed part and 32 hex digits, and must stay under 100
# characters in Channels' alphabet.
_CHANNEL_PREFIX_RE = re.compile(r"[A-Za-z0-9_.-]{1,50}")
PORTAL_CHANNEL_PREFIX = os.environ.get("PORTAL_CHANNEL_PREFIX", "").strip()
if not PORTAL_CHANNEL_PREFIX:
    PORTAL_CHANNEL_PREFIX = default_channel_prefix(DATABASES["default"], test_suffix=_test_suffix)
elif not _CHANNEL_PREFIX_RE.fullmatch(PORTAL_CHANNEL_PREFIX):
    raise ImproperlyConfigured(
        "PORTAL_CHANNEL_PREFIX must be 1 to 50 letters, digits, '-', '_' or '.', got "
        f"{PORTAL_CHANNEL_PREFIX!r}"
    )

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"REDIS_URL must start with redis://, got {REDIS_URL!r}")
    # Redis pub/sub. Every group here is broadcast-only (nothing is
    # sent to one consumer by channel name), so a message is one PUBLISH that each server
    # process fans out to its own sockets. RedisChannelLayer instead reads the whole group
    # back from Redis on every send and copies the message per member process (members of
    # a killed process linger for a day), and its consumers pay more per message: the
    # fan-out to many open queues is slower with it (docs/benchmarks.md, portal-fanout).
    # What pub/sub gives up: a process whose Redis connection is being re-established
    # misses what is published meanwhile. Publishing is best effort anyway (see
    # portal/notify/broadcast.py), and pages re-fetch when their websocket reconnects.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # A PING every 15 s keeps an idle subscription's connection busy, so a NAT
            # or proxy does not drop it silently.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "health_check_interval": 15}],
                "prefix": PORTAL_CHANNEL_PREFIX,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# The cache holds the API's per-token request counts: with Redis, one count shared by
# every web process; without, each process counts alone (the single-process demo).
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "portal",
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# --- logins ------------------------------------------------------------------------------
# django-axes counts failed logins (the portal's form and the admin's) per account and per
# client address, each on its own: guessing one account's password from many addresses, or
# many accounts' from one address, both stop at the limit until the cool-off has passed.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before any check
    "portal.accounts.roles.PermissionsBackend",  # Django's ModelBackend, permissions in one query
]
AXES_FAILURE_LIMIT = env_int("PORTAL_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("PORTAL_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.accounts.logins.locked_out"
# The client's address: REMOTE_ADDR, or with PORTAL_TRUSTED_PROXIES=N the address the
# N-th proxy from us saw in X-Forwarded-For (behind a proxy every REMOTE_ADDR is the
# proxy's, and one lockout would shut everyone out).
PORTAL_TRUSTED_PROXIES = env_int("PORTAL_TRUSTED_PROXIES", 0)
AXES_CLIENT_IP_CALLABLE = "portal.accounts.logins.client_ip"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
# Every date and time shown without an explicit format names its zone (portal/formats).
FORMAT_MODULE_PATH = ["portal.formats"]

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# With DEBUG off, WhiteNoise serves /static/ from what `collectstatic` wrote to STATIC_ROOT:
# compressed copies under content-hashed names, cached for a year. With DEBUG on (the demo,
# the tests) pages link the source files, so nothing needs collecting first; the manifest
# storage would refuse to render a page without its manifest.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- the model -------------------------------------------------------------------------
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
# "scripted" (the offline model) unless a key or a base URL says a real server is there.
PORTAL_MODEL = os.environ.get(
    "PORTAL_MODEL", "gpt-4o-mini" if (OPENAI_API_KEY or OPENAI_BASE_URL) else "scripted"
)
if not PORTAL_MODEL.strip():
    raise ImproperlyConfigured("PORTAL_MODEL must name a model, or be unset for the default")

# Milliseconds between words of the offline scripted model (`make run` sets 40 so the
# streaming is visible; tests keep 0).
PORTAL_SCRIPTED_DELAY_MS = env_int("PORTAL_SCRIPTED_DELAY_MS", 0)

# --- agents and runs -------------------------------------------------------------------
# Agents by name: dotted paths to builders returning an uncompiled graph or ReactAgent.
PORTAL_AGENTS = {
    "refunds": "agents.examples.refunds.build_agent",
    "transfers": "agents.examples.transfers.build_agent",
    "accounts": "agents.examples.accounts.build_agent",
    "contact": "agents.examples.contact.build_agent",
}
# --- durable threads helper: extra agents (tests register theirs this way) ----------
# PORTAL_AGENTS_EXTRA='{"name": "dotted.path.build_agent"}' adds to (or overrides)
# PORTAL_AGENTS, so worker subprocesses in tests can run test-only agents.
_agents_extra = os.environ.get("PORTAL_AGENTS_EXTRA", "").strip()
if _agents_extra:
    import json as _json

    try:
        _extra = _json.loads(_agents_extra)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"PORTAL_AGENTS_EXTRA must be JSON: {_exc}") from None
    if not isinstance(_extra, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in _extra.items()
    ):
        raise ImproperlyConfigured(
            "PORTAL_AGENTS_EXTRA must be a JSON object of names to dotted paths, e.g. "
            '{"echo": "tests.testagents.build_echo"}'
        )
    PORTAL_AGENTS.update(_extra)
# --- end durable threads helper ------------------------------------------------------
# Largest accepted input for starting or resuming a thread, in bytes of JSON.
PORTAL_MAX_INPUT_BYTES = env_int("PORTAL_MAX_INPUT_BYTES", 32_768, minimum=1024)
PORTAL_MAX_NOTE_CHARS = env_int("PORTAL_MAX_NOTE_CHARS", 2_000, minimum=1)
# A reviewer's claim on a request lapses this many seconds after it was taken (shown on
# the request page); a lapsed claim blocks nobody, and anyone who may claim can take it.
PORTAL_CLAIM_EXPIRES_SECONDS = env_int("PORTAL_CLAIM_EXPIRES_SECONDS", 15 * 60, minimum=1)
# Run the worker loop inside the web process (the embedded demo). Off in production,
# where `manage.py run_worker` processes do the work.
PORTAL_EMBEDDED_WORKER = env_bool("PORTAL_EMBEDDED_WORKER", not (_database_url and REDIS_URL))
PORTAL_RUN_LEASE_SECONDS = env_int("PORTAL_RUN_LEASE_SECONDS", 30, minimum=1)
PORTAL_RUN_MAX_ATTEMPTS = env_int("PORTAL_RUN_MAX_ATTEMPTS", 5, minimum=1)
# Seconds a `run_worker` process keeps its database connection between runs.
PORTAL_WORKER_CONN_MAX_AGE = env_int("PORTAL_WORKER_CONN_MAX_AGE", 300)
# How often an open queue page re-fetches its table: live updates are best effort (see
# portal/notify/broadcast.py), and this bounds how long a missed one can leave it stale.
PORTAL_QUEUE_RESYNC_SECONDS = env_int("PORTAL_QUEUE_RESYNC_SECONDS", 60, minimum=5)
# How often an open websocket checks its session and permission again. Changes made
# through Django (logout, deactivation, groups) close sockets at once; this bounds how long
# a lost event or a change made behind Django's back leaves one open.
PORTAL_WS_RECHECK_SECONDS = env_int("PORTAL_WS_RECHECK_SECONDS", 60, minimum=1)
# The JSON API answers decisions only when enabled (403 otherwise), as an operator switch.
PORTAL_API_ENABLED = env_bool("PORTAL_API_ENABLED", True)
# Requests one API token may make, as count/period (period s, m, h or d, e.g. 120/m);
# empty for no limit. Over it: 429 with Retry-After.
PORTAL_API_RATE = os.environ.get("PORTAL_API_RATE", "120/m").strip()
if PORTAL_API_RATE and not re.fullmatch(r"[1-9]\d*/\d*(s|sec|m|min|h|hour|d|day)", PORTAL_API_RATE):
    raise ImproperlyConfigured(
        f"PORTAL_API_RATE must be count/period like 120/m or 10/s, got {PORTAL_API_RATE!r}"
    )
# --- observability (portal/audit/observability.py) -------------------------------------------
# A bearer token Prometheus sends to /metrics/prometheus (users with the metrics
# permission may also open it with their session). Unset: sessions only.
PORTAL_METRICS_TOKEN = os.environ.get("PORTAL_METRICS_TOKEN", "").strip()
if PORTAL_METRICS_TOKEN and len(PORTAL_METRICS_TOKEN) < 32:
    raise ImproperlyConfigured(
        "PORTAL_METRICS_TOKEN must be at least 32 characters (generate one with "
        "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'), or unset"
    )
# /healthz answers 503 when no worker has sent a heartbeat for this many seconds. 0 (the
# default): the freshest heartbeat's age is reported but not judged, so a load balancer
# probing the web processes does not take them out when only the workers are down.
PORTAL_HEALTH_WORKER_MAX_AGE = env_int("PORTAL_HEALTH_WORKER_MAX_AGE", 0)
# The same for the notifiers (manage.py run_notifier, or the demo's embedded one).
PORTAL_HEALTH_NOTIFIER_MAX_AGE = env_int("PORTAL_HEALTH_NOTIFIER_MAX_AGE", 0)

# Per agent and reason policies; "*" matches any. See portal/models/policies.py.
PORTAL_POLICIES: dict[str, dict[str, object]] = {
    "*:*": {"separation_of_duties": True, "required_group": None, "expires_after": None},
}
# PORTAL_POLICIES_EXTRA='{"transfers:tool_approval": {"approvals_required": 2}}' adds
# entries to (or replaces entries of) PORTAL_POLICIES; `manage.py check` (run by every
# command, run_worker included) refuses an entry portal.models.policies cannot read.
_policies_extra = os.environ.get("PORTAL_POLICIES_EXTRA", "").strip()
if _policies_extra:
    import json as _json

    try:
        _policies = _json.loads(_policies_extra)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"PORTAL_POLICIES_EXTRA must be JSON: {_exc}") from None
    if not isinstance(_policies, dict) or not all(
        isinstance(k, str) and ":" in k and isinstance(v, dict) for k, v in _policies.items()
    ):
        raise ImproperlyConfigured(
            'PORTAL_POLICIES_EXTRA must be a JSON object of "<agent>:<reason>" keys to '
            'policies, e.g. {"transfers:tool_approval": {"approvals_required": 2}}'
        )
    PORTAL_POLICIES.update(_policies)

# --- notifications ---------------------------------------------------------------------
# Email goes through Django's backend: the console in the demo, one line a message; set
# EMAIL_BACKEND (and EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD,
# EMAIL_USE_TLS) for SMTP.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "portal.notify.console_mail.OneLineEmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "portal@localhost")
# Deliveries: a failed try is retried after PORTAL_NOTIFY_BACKOFF_SECONDS, doubling each
# time up to PORTAL_NOTIFY_BACKOFF_MAX_SECONDS; after PORTAL_NOTIFY_MAX_ATTEMPTS tries it
# is given up (the admin's delivery log says why). A webhook gets PORTAL_NOTIFY_TIMEOUT
# seconds to answer 2xx.
PORTAL_NOTIFY_BACKOFF_SECONDS = env_seconds("PORTAL_NOTIFY_BACKOFF_SECONDS", 10)
PORTAL_NOTIFY_BACKOFF_MAX_SECONDS = env_seconds("PORTAL_NOTIFY_BACKOFF_MAX_SECONDS", 3600)
PORTAL_NOTIFY_MAX_ATTEMPTS = env_int("PORTAL_NOTIFY_MAX_ATTEMPTS", 10, minimum=1)
PORTAL_NOTIFY_TIMEOUT = env_int("PORTAL_NOTIFY_TIMEOUT", 10, minimum=1)
# Every outgoing target (a subscription's webhook or Slack hook, an outside agent's
# callback_url, the Slack API) may name or resolve to a loopback, private or link-local
# address (or localhost) only with this on: otherwise an admin's typo or an API token could
# make the portal post into its own network. On for development and tests whose receivers
# listen on loopback. PORTAL_CALLBACK_ALLOW_PRIVATE is its former name, still read.
PORTAL_ALLOW_PRIVATE_TARGETS = env_bool(
    "PORTAL_ALLOW_PRIVATE_TARGETS", env_bool("PORTAL_CALLBACK_ALLOW_PRIVATE", False)
)
# Slack (docs/slack.md): the app's bot token posts requests to channels, its signing
# secret checks what Slack sends to /integrations/slack/interactions. The API's address
# is a setting so that tests talk to a fake Slack on loopback.
PORTAL_SLACK_BOT_TOKEN = os.environ.get("PORTAL_SLACK_BOT_TOKEN", "")
PORTAL_SLACK_SIGNING_SECRET = os.environ.get("PORTAL_SLACK_SIGNING_SECRET", "")
PORTAL_SLACK_API_URL = os.environ.get("PORTAL_SLACK_API_URL", "https://slack.com/api").rstrip("/")
# Links in notifications point here (empty: they are left out).
PORTAL_BASE_URL = os.environ.get("PORTAL_BASE_URL", "").rstrip("/")

# --- production hardening (effective with DEBUG off) -----------------------------------
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# --- headers -----------------------------------------------------------------------------
# Every page, the admin and the API docs pass this policy: scripts and styles come only
# from our static files (no inline <script>, on*= handler, style attribute or eval; htmx
# is configured not to inject styles or evaluate anything), so injected markup cannot run.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        # 'self' covers the live pages' websockets too (ws: and wss: on this host).
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"refusals_without_traceback": {"()": "portal.logfilters.RefusalsWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "portal": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
        # Django's request log: an expected 403 or 404 is one line, not a traceback.
        "django.request": {"filters": ["refusals_without_traceback"]},
    },
}
