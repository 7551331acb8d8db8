"""Agent Reach settings: one module, driven by environment variables.

Every value comes from the environment through the small typed helpers below, with
embedded defaults that work on a bare machine (SQLite and files under ``var/``, the
Redis that ``manage.py up`` starts, the local model). Nothing here connects to
Redis, the database or the model at import time.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else default


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


VAR_DIR = Path(env_str("REACH_VAR_DIR") or BASE_DIR / "var")
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _var_file(name: str) -> str:
    """Read a value the launcher wrote under ``var/`` (empty when absent)."""
    path = VAR_DIR / name
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _generated_once(name: str, factory) -> str:
    """Return a value kept in ``var/<name>``, generating it on first use."""
    path = VAR_DIR / name
    value = _var_file(name)
    if not value:
        value = factory()
        path.write_text(value + "\n")
        path.chmod(0o600)
    return value


SECRET_KEY = env_str("DJANGO_SECRET_KEY") or _generated_once(
    "secret_key", lambda: secrets.token_urlsafe(50)
)
# The keys that encrypt stored secrets (registry/secrets.py), newest first: the
# first encrypts, every one decrypts (README.md "Rotating the secrets key").
REACH_SECRETS_KEYS = [
    env_str("REACH_SECRETS_KEY") or SECRET_KEY,
    *env_list("REACH_SECRETS_OLD_KEYS", ""),
]
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")
CSRF_FAILURE_VIEW = "reach_site.errors.csrf_failure"

INSTALLED_APPS = [
    # Daphne's app only makes runserver serve ASGI (development); loading it
    # costs every process, the worker and beat included, twisted: ~40 MB each.
    # The web process runs its server itself (reach_site/launcher.py, web_argv).
    *(["daphne"] if DEBUG else []),
    # The admin with a site that asks staff for their second factor
    # (accounts/admin_site.py).
    "accounts.apps.ReachAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's and Redoc's assets from PyPI, served by WhiteNoise: no CDN.
    "drf_spectacular_sidecar",
    # Sign-in: login throttling (axes), two-factor devices (django-otp).
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "reach_site",
    "agents",  # migration history only (agents/apps.py)
    "audit",
    "accounts",
    "registry",
    "runs",
    "effects",
    "approvals",
    "traces",
    "memory",
    "feedback",
    "guardrails",
    "notify",
    "evals",
    "gateway",
    "console",
    "backups",
    "sso",
    "automations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "reach_site.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # request.user.is_verified(): this session passed its second factor.
    "django_otp.middleware.OTPMiddleware",
    # ... and so did a sign-in through the identity provider (single sign-on).
    "accounts.middleware.ProviderSignInMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Turns a login refused for too many failures into the login page saying so.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "reach_site.urls"
ASGI_APPLICATION = "reach_site.asgi.application"
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
                "reach_site.context_processors.reach",
            ],
        },
    },
]

# Database: SQLite under var/ unless DATABASE_URL says otherwise.
SQLITE_PATH = VAR_DIR / "reach.sqlite3"
#: Threads of each Celery worker (runs wait on the model, so many); the
#: PostgreSQL pool below is sized to cover them plus POOL_SPARE.
WORKER_CONCURRENCY = env_int("REACH_WORKER_CONCURRENCY", 64)
POOL_SPARE = 8
DATABASE_URL = env_str("DATABASE_URL") or f"sqlite:///{SQLITE_PATH}"
_default_db = dj_database_url.parse(DATABASE_URL)
if _default_db["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions take the write lock up front, so the busy timeout
    # applies instead of failing at once on a read->write upgrade
    # (docs/stack-notes.md trap 2).
    # Each of a worker's threads holds a connection, and each connection its own
    # page cache (2 MB by default); in WAL mode with the web and the worker both
    # writing, a connection's cache is dropped whenever another one has written
    # since its last read, so a larger one buys little. 512 KB.
    _default_db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
            "PRAGMA cache_size=-512;"
        ),
    }
    # A file, not memory: integration tests share it with worker subprocesses.
    _default_db["TEST"] = {
        "NAME": env_str("REACH_TEST_SQLITE") or str(VAR_DIR / "test_reach.sqlite3")
    }
    EMBEDDED_DATABASE = f"sqlite:///{SQLITE_PATH}" == DATABASE_URL
else:
    if env_bool("REACH_DB_POOL", True):
        # Celery closes connections around every task; a pool keeps them cheap. A
        # worker holds one connection per busy thread (and a few for tool handlers
        # and the heartbeat); a thread that finds the pool empty waits `timeout`
        # seconds and its run fails, so by default the pool covers the threads.
        _default_db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 2,
            "max_size": env_int(
                "REACH_DB_POOL_MAX", max(20, WORKER_CONCURRENCY + POOL_SPARE)
            ),
            "timeout": 20,
        }
        _default_db["CONN_MAX_AGE"] = 0
        # Check a pooled connection when it is handed out: one the server closed
        # while it sat idle (a restart, pg_terminate_backend) is replaced, not used.
        _default_db["CONN_HEALTH_CHECKS"] = True
    EMBEDDED_DATABASE = False
if env_str("REACH_TEST_DB_NAME"):
    # Lets parallel test runs (several checkouts, CI) use separate test databases.
    _default_db["TEST"] = {"NAME": env_str("REACH_TEST_DB_NAME")}
DATABASES = {"default": _default_db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Single sign-on (sso/, README "Single sign-on"): OpenID Connect, off unless an
# issuer and a client id are set. The client secret is the secret
# OIDC_CLIENT_SECRET (REACH_SECRET_OIDC_CLIENT_SECRET, or Admin -> Secrets).
REACH_OIDC_ISSUER = env_str("REACH_OIDC_ISSUER")
REACH_OIDC_CLIENT_ID = env_str("REACH_OIDC_CLIENT_ID")
REACH_OIDC_ENABLED = bool(REACH_OIDC_ISSUER and REACH_OIDC_CLIENT_ID)
REACH_OIDC_PROVIDER_NAME = env_str("REACH_OIDC_PROVIDER_NAME", "single sign-on")
# Endpoints found by discovery (<issuer>/.well-known/openid-configuration)
# unless set here.
REACH_OIDC_AUTHORIZATION_ENDPOINT = env_str("REACH_OIDC_AUTHORIZATION_ENDPOINT")
REACH_OIDC_TOKEN_ENDPOINT = env_str("REACH_OIDC_TOKEN_ENDPOINT")
REACH_OIDC_USERINFO_ENDPOINT = env_str("REACH_OIDC_USERINFO_ENDPOINT")
REACH_OIDC_JWKS_URI = env_str("REACH_OIDC_JWKS_URI")
REACH_OIDC_SCOPES = env_str("REACH_OIDC_SCOPES", "openid email profile")
REACH_OIDC_SIGN_ALGO = env_str("REACH_OIDC_SIGN_ALGO", "RS256")
REACH_OIDC_GROUPS_CLAIM = env_str("REACH_OIDC_GROUPS_CLAIM", "groups")
# "idp-approvers=approvers,idp-ops=operators": provider group=product group.
REACH_OIDC_GROUP_MAP = env_str("REACH_OIDC_GROUP_MAP")
REACH_OIDC_EMAIL_VERIFIED_CLAIM = env_str(
    "REACH_OIDC_EMAIL_VERIFIED_CLAIM", "email_verified"
)
REACH_OIDC_CREATE_USERS = env_bool("REACH_OIDC_CREATE_USERS", True)
REACH_OIDC_TIMEOUT_S = env_float("REACH_OIDC_TIMEOUT_S", 10.0)
# The lockout check first (axes), then the users' passwords and permissions, then
# single sign-on when it is configured.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    *(["sso.backend.SSOBackend"] if REACH_OIDC_ENABLED else []),
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Security: strict by default; HTTPS settings switch on behind a TLS proxy.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
BEHIND_TLS_PROXY = env_bool("REACH_BEHIND_TLS_PROXY", False)
if BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("REACH_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("REACH_HSTS_PRELOAD", True)

# Redis: REDIS_URL, else the embedded server the launcher started (var/redis.url).
REDIS_URL = env_str("REDIS_URL") or _var_file("redis.url") or "redis://127.0.0.1:6399/0"
EMBEDDED_REDIS = env_bool("REACH_EMBEDDED_REDIS", not env_str("REDIS_URL"))

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": "reach"},
    }
}

# Celery: the agent loop runs in a threads pool (I/O bound) and every task is
# idempotent, claimed with a guarded UPDATE (docs/stack-notes.md traps 4, 8).
REACH_TASK_HARD_LIMIT_S = env_int("REACH_TASK_HARD_LIMIT_S", 1800)
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "reach"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
# Enforced by the prefork pool only; in the threads pool time is bounded inside the
# task (model timeouts, abandonable handlers, the time budget)
# (docs/stack-notes.md trap 8).
CELERY_TASK_TIME_LIMIT = REACH_TASK_HARD_LIMIT_S
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # Longer than the hard limit: a running task is never delivered twice.
    "visibility_timeout": REACH_TASK_HARD_LIMIT_S * 2,
    # Sweep for unacked messages of dead workers every interval, not every 10th
    # (kombu 5.7 defaults to 10 s x 10) (docs/stack-notes.md trap 4).
    "unacked_restore_interval": 10,
    "unacked_restore_throttle": 1,
    "socket_timeout": 5,
    "socket_connect_timeout": 5,
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_CONCURRENCY = WORKER_CONCURRENCY

# The model: any OpenAI-compatible endpoint; else the local model the launcher
# runs (its URL under var/model.url).
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or _var_file("model.url")
OPENAI_API_KEY = env_str("OPENAI_API_KEY") or "local-model-no-key"
OPENAI_MODEL = env_str("OPENAI_MODEL") or "qwen2.5-coder-1.5b-instruct"
LOCAL_MODEL = env_bool("REACH_LOCAL_MODEL", not env_str("OPENAI_BASE_URL"))
# Questions get no write tools (engine.questions; each agent may switch it off):
# the launcher turns it on with the built-in model, which runs as an assistant.
QUESTIONS_READ_ONLY = env_bool("REACH_QUESTIONS_READ_ONLY", False)
REACH_MODEL_TIMEOUT_S = env_float("REACH_MODEL_TIMEOUT_S", 120.0)
REACH_MODEL_CONNECT_TIMEOUT_S = env_float("REACH_MODEL_CONNECT_TIMEOUT_S", 5.0)
REACH_MODEL_MAX_RETRIES = env_int("REACH_MODEL_MAX_RETRIES", 3)
REACH_MODEL_TEMPERATURE = env_float("REACH_MODEL_TEMPERATURE", 0.0)

# Runs: leases, sizes, demo.
REACH_LEASE_S = env_int("REACH_LEASE_S", 60)
REACH_HEARTBEAT_S = env_float("REACH_HEARTBEAT_S", 10.0)
# A turn whose only call is a read that finishes within this is written in one
# transaction and one push with the model's reply (engine.loop.Engine.read_window_s).
REACH_READ_WINDOW_MS = env_float("REACH_READ_WINDOW_MS", 100.0)
#: How often a run waiting on its model checks for a cancel and its time budget.
REACH_CANCEL_POLL_MS = env_float("REACH_CANCEL_POLL_MS", 500.0)
# A reply's streamed pieces leave in one push (and one Redis write) per window of
# this many milliseconds (runs/streaming.py); a reply done within one costs none.
REACH_STREAM_COALESCE_MS = env_float("REACH_STREAM_COALESCE_MS", 50.0)
REACH_REAPER_INTERVAL_S = env_float("REACH_REAPER_INTERVAL_S", 15.0)
REACH_QUEUED_GRACE_S = env_int("REACH_QUEUED_GRACE_S", 30)
REACH_MAX_MESSAGE_CHARS = env_int("REACH_MAX_MESSAGE_CHARS", 8000)
# A message sent while a run goes on: queue, interrupt or refuse (a new
# conversation's default; each conversation may choose its own).
REACH_ON_BUSY = env_str("REACH_ON_BUSY", "queue")
if REACH_ON_BUSY not in ("queue", "interrupt", "refuse"):
    raise ValueError(
        f"REACH_ON_BUSY is queue, interrupt or refuse, not {REACH_ON_BUSY!r}."
    )
# Automations: a schedule fires at most this often; a due time later than this
# (the beat was down) follows the schedule's missed-run policy; a trigger's
# signature may be this old (or this far ahead), and is refused when seen again.
REACH_SCHEDULE_MIN_INTERVAL_S = env_int("REACH_SCHEDULE_MIN_INTERVAL_S", 60)
REACH_SCHEDULE_LATE_S = env_int("REACH_SCHEDULE_LATE_S", 60)
REACH_TRIGGER_TOLERANCE_S = env_int("REACH_TRIGGER_TOLERANCE_S", 300)
REACH_MAX_STORED_RESULT_CHARS = env_int("REACH_MAX_STORED_RESULT_CHARS", 100_000)
REACH_MAX_IMPORT_BYTES = env_int("REACH_MAX_IMPORT_BYTES", 10_000_000)
REACH_STEPS_PER_PAGE = env_int("REACH_STEPS_PER_PAGE", 500)
REACH_SEED_DEMO = env_bool("REACH_SEED_DEMO", EMBEDDED_DATABASE)
REACH_DEMO_PASSWORD = env_str("REACH_DEMO_PASSWORD")
REACH_EMAIL_DOMAIN = env_str("REACH_EMAIL_DOMAIN", "example.com")
REACH_TOOL_THREADS = env_int("REACH_TOOL_THREADS", 32)
REACH_MAX_ABANDONED_THREADS = env_int("REACH_MAX_ABANDONED_THREADS", 16)
# Extension and testing hook: modules imported at start-up (agents/apps.py) so the
# python tool handlers they register with registry.handlers.register exist in
# every process, e.g. REACH_EXTRA_TOOL_MODULES=tests.support.test_tools.
REACH_EXTRA_TOOL_MODULES = env_list("REACH_EXTRA_TOOL_MODULES", "")

# Email: a file backend under var/ by default (the demo's "sent" mail is readable).
EMAIL_BACKEND = env_str(
    "DJANGO_EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend"
)
EMAIL_FILE_PATH = str(VAR_DIR / "mail")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agent-reach@example.com")
# Seconds an SMTP connection may block (Django's default is none: a stalled mail
# server would hold a dispatcher, or a worker sending a tool's mail, for ever).
EMAIL_TIMEOUT = env_float("REACH_EMAIL_TIMEOUT", 10.0)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "runs.api.auth.BearerTokenAuthentication",
        "infra.api.auth.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["infra.api.renderers.UnicodeJSONRenderer"],
    # Bounded JSON (size, depth, storable text): malformed bodies are a 4xx.
    "DEFAULT_PARSER_CLASSES": ["infra.api.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "infra.api.schema.ReachAutoSchema",
    # In Redis, not Django's cache: one limit across every web process.
    "DEFAULT_THROTTLE_CLASSES": ["infra.api.throttling.RedisUserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": env_str("REACH_API_RATE", "1200/min")},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "EXCEPTION_HANDLER": "infra.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Reach API",
    "DESCRIPTION": "Conversations, tasks, steps, tools, approvals and traces.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# The default is per process: nothing that several processes must share may use
# it (the API throttle and the tools' rate limits and result cache live in Redis).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Shared by every process: the product's Redis (REDIS_URL, read when first
    # used); the login throttle's counters.
    "shared": {
        "BACKEND": "infra.cache.SharedRedisCache",
        "KEY_PREFIX": "reach",
        "OPTIONS": {"socket_timeout": 2, "socket_connect_timeout": 2},
    },
}

# Sign-in (accounts/, README "Signing in"). Failed logins are counted per account
# and per address in Redis (one count across every web process); at the limit
# that account, or that address, waits REACH_LOGIN_LOCKOUT_MINUTES.
REACH_LOGIN_FAILURES_PER_ACCOUNT = env_int("REACH_LOGIN_FAILURES_PER_ACCOUNT", 5)
REACH_LOGIN_FAILURES_PER_ADDRESS = env_int("REACH_LOGIN_FAILURES_PER_ADDRESS", 20)
REACH_LOGIN_LOCKOUT_MINUTES = env_int("REACH_LOGIN_LOCKOUT_MINUTES", 15)
AXES_ENABLED = env_bool("REACH_LOGIN_THROTTLE", True)
AXES_HANDLER = "accounts.throttle.LoginThrottleHandler"
AXES_CACHE = "shared"
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_FAILURE_LIMIT = "accounts.throttle.failure_limit"
AXES_COOLOFF_TIME = "accounts.throttle.cool_off"
# Attempts while locked out neither count nor extend the wait.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = False
AXES_LOCKOUT_CALLABLE = "accounts.throttle.lockout_response"
AXES_ENABLE_ADMIN = False
AXES_VERBOSE = False
AXES_USERNAME_CALLABLE = "accounts.throttle.client_username"
# The socket's peer; behind the TLS proxy, what it appends to X-Forwarded-For.
AXES_CLIENT_IP_CALLABLE = "accounts.throttle.client_address"
# Two-factor (django-otp): who must have it ("approvers", "admins"; empty: nobody
# is made to, anyone may); the issuer the authenticator app shows.
REACH_REQUIRE_2FA = env_list("REACH_REQUIRE_2FA", "")
OTP_TOTP_ISSUER = env_str("REACH_2FA_ISSUER", "Agent Reach")
# A wrong code makes the next wait 1, 2, 4 … seconds (per device).
OTP_TOTP_THROTTLE_FACTOR = 1
OTP_STATIC_THROTTLE_FACTOR = 1

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "infra.logging.RedactingFilter"}},
    "formatters": {"json": {"()": "infra.logging.JsonFormatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "filters": ["redact"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("REACH_LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "openai": {"level": "WARNING"},
    },
}

# /metrics: with a token, only `Authorization: Bearer <token>`; without one, only
# these peer addresses or networks (the socket's peer: behind a proxy that is the
# proxy, so set the token there).
REACH_METRICS_TOKEN = env_str("REACH_METRICS_TOKEN")
REACH_METRICS_ALLOWED_ADDRESSES = env_list(
    "REACH_METRICS_ALLOWED_ADDRESSES", "127.0.0.1,::1"
)

# Approvals: email approvers about new requests (off by default).
# The MCP gateway: the longest an MCP call waits for its run or its approval
# (0: until the run's time budget or the approval's TTL).
REACH_MCP_MAX_WAIT_S = env_float("REACH_MCP_MAX_WAIT_S", 0.0)
# How long a gateway call's untrusted read (search_notes) taints its user's later
# gateway calls in any MCP session; within one session the taint never lapses.
REACH_GATEWAY_TAINT_WINDOW_S = env_float("REACH_GATEWAY_TAINT_WINDOW_S", 900.0)

REACH_APPROVAL_EMAILS = env_bool("REACH_APPROVAL_EMAILS", False)
REACH_PUBLIC_URL = env_str("REACH_PUBLIC_URL", "http://127.0.0.1:8000")
# Notify (notify/): Slack's Web API, the names of the secrets (the admin's
# Secrets or REACH_SECRET_<NAME>) of the bot token and the signing secret; the
# webhooks' timeout; the deliveries' retries (doubling from the backoff).
REACH_SLACK_API_URL = env_str("REACH_SLACK_API_URL", "https://slack.com/api/")
REACH_SLACK_BOT_TOKEN_SECRET = env_str(
    "REACH_SLACK_BOT_TOKEN_SECRET", "SLACK_BOT_TOKEN"
)
REACH_SLACK_SIGNING_SECRET = env_str(
    "REACH_SLACK_SIGNING_SECRET", "SLACK_SIGNING_SECRET"
)
REACH_SLACK_TIMEOUT_S = env_int("REACH_SLACK_TIMEOUT_S", 5)
REACH_WEBHOOK_TIMEOUT_S = env_float("REACH_WEBHOOK_TIMEOUT_S", 5.0)
REACH_NOTIFY_MAX_ATTEMPTS = env_int("REACH_NOTIFY_MAX_ATTEMPTS", 10)
REACH_NOTIFY_BACKOFF_S = env_float("REACH_NOTIFY_BACKOFF_S", 30.0)
REACH_NOTIFY_BACKOFF_MAX_S = env_float("REACH_NOTIFY_BACKOFF_MAX_S", 3600.0)
# Traces: how long finished runs are kept (0 keeps them for ever).
REACH_TRACE_RETENTION_DAYS = env_int("REACH_TRACE_RETENTION_DAYS", 0)
# The review queue (feedback/): the share of finished runs with no thumbs down
# and no limit hit that it also shows, to be labelled (0 to 1).
REACH_REVIEW_SAMPLE_RATE = min(
    1.0, max(0.0, env_float("REACH_REVIEW_SAMPLE_RATE", 0.1))
)
# Memory (memory/): how long superseded, forgotten and expired items are kept (0
# keeps them for ever); what a run is given at its start (items, tokens, off);
# how many items recall returns; the days remember keeps a fact by default (0:
# until it is changed or deleted).
REACH_MEMORY_RETENTION_DAYS = env_int("REACH_MEMORY_RETENTION_DAYS", 0)
REACH_MEMORY_IN_CONTEXT = env_bool("REACH_MEMORY_IN_CONTEXT", True)
REACH_MEMORY_CONTEXT_ITEMS = env_int("REACH_MEMORY_CONTEXT_ITEMS", 5)
REACH_MEMORY_CONTEXT_TOKENS = env_int("REACH_MEMORY_CONTEXT_TOKENS", 600)
REACH_MEMORY_RECALL_ITEMS = env_int("REACH_MEMORY_RECALL_ITEMS", 5)
REACH_MEMORY_DEFAULT_DAYS = env_int("REACH_MEMORY_DEFAULT_DAYS", 0)
# OpenTelemetry (traces/otel.py): every finished run goes to an OTLP/HTTP collector
# when an endpoint is set. The SDK reads the other OTEL_* variables itself
# (headers, timeout, compression, service name, resource attributes, sampler,
# batching); these two only say whether to export and whether content goes along.
REACH_OTEL_ENABLED = (
    bool(
        env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    and not env_bool("OTEL_SDK_DISABLED", False)
    and env_str("OTEL_TRACES_EXPORTER", "otlp").lower() != "none"
)
# Messages, tool arguments and results (redacted) only when asked for.
REACH_OTEL_CAPTURE_CONTENT = env_bool(
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", False
)
# HTTP tools (registry/adapters/http.py, registry/adapters/ssrf.py).
# Hostnames (or IP networks) of internal services: calls to them stay "inside the
# house" (no approval just for taint), and these names may resolve to private
# addresses. Anything else must be public unless allowed_hosts lists the address.
REACH_INTERNAL_HOSTS = env_list("REACH_INTERNAL_HOSTS", "")
REACH_HTTP_MAX_REDIRECTS = env_int("REACH_HTTP_MAX_REDIRECTS", 5)
REACH_HTTP_MAX_RESPONSE_BYTES = env_int("REACH_HTTP_MAX_RESPONSE_BYTES", 2_000_000)
# Characters of a non-JSON response body given to the model.
REACH_HTTP_TEXT_CHARS = env_int("REACH_HTTP_TEXT_CHARS", 2000)
# A CA bundle (PEM path) for internal services with a private CA; empty: certifi.
REACH_HTTP_CA_BUNDLE = env_str("REACH_HTTP_CA_BUNDLE", "")
