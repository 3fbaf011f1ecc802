"""Settings, all from the environment.

With nothing set, gpuquota runs on a laptop: SQLite in `var/`, Celery work done
in-process (no broker), mail printed to the console. `DATABASE_URL` switches to
PostgreSQL, `REDIS_URL` to Redis as Celery broker and cache, `EMAIL_URL` to SMTP.
`DEBUG=0` turns on the production hardening that `manage.py check --deploy` asks for.
"""

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from agent import __version__ as GPUQUOTA_VERSION
from gpuquota.core.env import modules_installed

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("GPUQUOTA_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from exc


def email_settings(url: str) -> dict:
    """Translate EMAIL_URL (console://, file://var/mail, smtp://user:pass@host:port?tls=1,
    smtps://...)."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        path = (parsed.netloc + parsed.path).strip()
        if not path:
            raise ImproperlyConfigured(f"EMAIL_URL names no folder: {url!r}")
        folder = Path(path) if Path(path).is_absolute() else BASE_DIR / path
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "EMAIL_FILE_PATH": str(folder),
        }
    if parsed.scheme == "console":
        return {"EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}
    if parsed.scheme == "locmem":
        return {"EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend"}
    if parsed.scheme in ("smtp", "smtps"):
        if not parsed.hostname:
            raise ImproperlyConfigured(f"EMAIL_URL has no host: {url!r}")
        query = parse_qs(parsed.query)
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": parsed.hostname,
            "EMAIL_PORT": parsed.port or (465 if parsed.scheme == "smtps" else 25),
            "EMAIL_HOST_USER": unquote(parsed.username or ""),
            "EMAIL_HOST_PASSWORD": unquote(parsed.password or ""),
            "EMAIL_USE_SSL": parsed.scheme == "smtps",
            "EMAIL_USE_TLS": query.get("tls", ["0"])[0] in ("1", "true"),
            "EMAIL_TIMEOUT": 30,
        }
    raise ImproperlyConfigured(
        f"EMAIL_URL scheme must be console, file, locmem, smtp or smtps: {url!r}"
    )


DEBUG = env_bool("DEBUG", True)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG=0")
    SECRET_KEY = "insecure-development-key-only-for-the-embedded-default-never-in-production"

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "accounts",
    "gpuquota.core",
    "gpuquota.inventory",
    "gpuquota.outbox",
    "gpuquota.reservations",
    "gpuquota.ingest",
    "gpuquota.rates",
    "gpuquota.usage",
    "gpuquota.schedulers",
    "gpuquota.schedulers.kubernetes",  # kubernetes: its page and contributions
    "gpuquota.lending",
    "gpuquota.jobs",
    "gpuquota.reliability",
    "reports",
    "gpuquota.mail",
    "gpuquota.demo",
    "reclaim",
    # telemetry: dcgm-exporter and Prometheus importers
    "gpuquota.telemetry",
]

MIDDLEWARE = [
    "gpuquota.core.dispatch.TasksAfterResponseMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "gpuquota.core.middleware.ApiErrorMiddleware",
    # The agents' batches (node tokens, JSON) skip everything below: sessions, CSRF, CSP...
    "gpuquota.ingest.middleware.AgentEndpointMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "accounts.middleware.UserTimezoneMiddleware",
    "gpuquota.core.errorpages.ProductErrorPagesMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gpuquota.urls"
WSGI_APPLICATION = "gpuquota.wsgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

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
                "accounts.context_processors.navigation",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_URL must be a postgres:// URL")
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # A database host that drops packets costs a request this long, never a hang (a
    # `connect_timeout` in the URL wins).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT_S", 5))
    DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME") or None}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "gpuquota.sqlite3",
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Broker, cache, Celery ----------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # A Redis that is down or frozen costs a request a second at most, never a hang
            # (the API throttle then fails open: accounts/throttling.py).
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    # No broker: tasks run in the caller's process. The embedded default runs the
    # beat schedule on an in-process timer (see `manage.py demo`).
    # A host named, or kombu logs "No hostname was supplied" whenever an eager task runs.
    CELERY_BROKER_URL = "memory://localhost/"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Beat's state (`celery beat`, `celery worker --beat`) lives in var/, not the working folder.
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Mail ---------------------------------------------------------------------
globals().update(email_settings(os.environ.get("EMAIL_URL", "console://")))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "gpuquota <gpuquota@localhost>")
# The global off switch of gpuquota.mail: off, nothing is sent and nothing recorded as sent.
MAIL_ENABLED = env_bool("GPUQUOTA_MAIL_ENABLED", True)
if MAIL_ENABLED and not DEBUG and not os.environ.get("EMAIL_URL"):
    raise ImproperlyConfigured(
        "Mail is on but EMAIL_URL is not set: set it (smtp://..., or console:// to print mail) "
        "or switch mail off with GPUQUOTA_MAIL_ENABLED=0"
    )
# Links in mail point here.
GPUQUOTA_BASE_URL = os.environ.get("GPUQUOTA_BASE_URL", "http://127.0.0.1:8000")

# --- Time, language -----------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Static files -------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
WHITENOISE_USE_FINDERS = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- REST API -----------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "gpuquota.core.api.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "gpuquota.core.pagination.StrictLimitOffsetPagination",
    "DEFAULT_PARSER_CLASSES": [
        "gpuquota.core.parsers.SafeJSONParser",
        "gpuquota.core.parsers.SafeFormParser",
        "gpuquota.core.parsers.SafeMultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["accounts.throttling.ApiUserRateThrottle"],
    "PAGE_SIZE": 100,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpuquota API",
    "DESCRIPTION": "GPU quotas, reservations, telemetry ingestion and chargeback.",
    "VERSION": GPUQUOTA_VERSION,
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and ReDoc from pinned local static files: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "StatementStatusEnum": "reports.models.Statement.Status",
        "ReservationStatusEnum": "gpuquota.reservations.models.Reservation.Status",
    },
    # The agent endpoint is a plain Django view (for speed); its operation is added here.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "gpuquota.ingest.schema.agent_batches_schema",
        "gpuquota.core.schema.error_responses",
        "gpuquota.core.schema.tags_by_area",
    ],
}
# Per user: personal tokens and browser sessions (accounts/throttling.py); "0" turns off.
API_THROTTLE_TOKEN_RATE = os.environ.get("API_THROTTLE_TOKEN_RATE", "600/min")
API_THROTTLE_SESSION_RATE = os.environ.get("API_THROTTLE_SESSION_RATE", "1200/min")

# --- Content-Security-Policy (django-csp; docs/security.md) -------------------
# Every response: scripts, styles, images, fonts and requests from this server only; no
# inline script (the pages' scripts are static files: static/js/), no plugins, no <base>,
# forms post here only, never framed. Inline style attributes stay allowed (bar widths in
# the charts). The API docs widen it for their data: images and ReDoc's worker
# (gpuquota/core/docs.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# --- Login throttling (django-axes) -------------------------------------------
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # --- sso: local passwords (break-glass where limited), OIDC, LDAP/AD (docs/sso.md)
    "accounts.sso.forms.LocalBackend",
    "accounts.sso.oidc.OidcBackend",
    # The LDAP/AD login is an extra (requirements-ldap.txt); without it, it is off.
    *(["accounts.sso.ldap.DirectoryBackend"] if modules_installed("ldap", "django_auth_ldap")
      else []),
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # each on its own: per user, per address
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "accounts.lockout.login_locked_out"
# The client address is the peer's; behind a proxy, see django-axes' AXES_IPWARE_* settings.
AXES_IPWARE_META_PRECEDENCE_ORDER = ["REMOTE_ADDR"]

# --- Logging ------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # runserver's access log; the demo quiets it so its banner stays readable.
        "django.server": {"level": os.environ.get("ACCESS_LOG_LEVEL", "INFO")},
        # django-axes: each login's success and clean-up at INFO, failures and lockouts at
        # WARNING; the demo keeps the warnings only.
        "axes": {"level": os.environ.get("LOGIN_LOG_LEVEL", "INFO")},
        # Every Slurm/Kubernetes command with its output; `slurm_demo` quiets it likewise.
        "gpuquota.schedulers.runner": {
            "level": os.environ.get("SCHEDULER_COMMAND_LOG_LEVEL", "INFO")},
    },
}

# --- Production hardening (DEBUG=0) -------------------------------------------
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    # The agent endpoint is served over plain HTTP inside clusters too: skip the redirect.
    SECURE_REDIRECT_EXEMPT = [r"^api/v1/agent/", r"^healthz$", r"^readyz$", r"^metrics$"]
