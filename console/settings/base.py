"""Settings shared by every environment. Only environment variables differ between deployments.

Embedded default (no variables set): SQLite, a Celery broker in a local folder, the in-memory
channel layer, artifacts on local disk. ``DATABASE_URL`` and ``REDIS_URL`` switch to PostgreSQL and
Redis with no code change.
"""

from datetime import timedelta
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
# FileAwareEnv: any variable may instead be given as NAME_FILE, a path to read it from (how compose
# hands the console its generated SECRET_KEY without putting it in the environment).
env = environ.FileAwareEnv()

VAR_DIR = Path(env.str("PORTICO_VAR_DIR", default=str(BASE_DIR / "var")))

# Each environment decides where its key comes from (production: required; platform: generated
# into VAR_DIR; development and tests: a published one). Empty here, so nothing signs by accident.
SECRET_KEY = ""
DEBUG = False
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=LOOPBACK_HOSTS)
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "axes",
    "repository",
    "console",
    "serving",
]

MIDDLEWARE = [
    # First, so every answer (a redirect, a 403, a 500) carries the id its log lines carry.
    "console.security.request_id.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = "console.wsgi.application"

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
                "console.context_processors.validation_sandbox",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'portico.sqlite3'}"),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # NOTE: console, worker and serving share one SQLite file; WAL and a busy timeout keep their
    # concurrent writes from failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }

elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # NOTE: bounded waits on a database that is down or unreachable: connecting gives up after
    # PORTICO_DB_CONNECT_TIMEOUT_S, and TCP keepalives find a peer that vanished mid-connection.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "connect_timeout": env.int("PORTICO_DB_CONNECT_TIMEOUT_S", default=5),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out username/address before the password is even checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Login throttling (django-axes, attempts kept in the database so every console process sees
# them): this many failures from one address for one username lock that pair out for a while.
AXES_FAILURE_LIMIT = env.int("PORTICO_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("PORTICO_LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "collected-static"

# Artifact blobs go through Django's storage API (docs/registry.md "Blob storage"):
# PORTICO_BLOB_STORAGE is "filesystem" (a folder, PORTICO_BLOB_DIR: one host, or a shared volume),
# "s3" (an S3-compatible bucket through django-storages) or the dotted path of another backend.
# NOTE: no credential setting on purpose: the S3 backend and serving's reader both take them from
# boto3's default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, an instance role).
PORTICO_BLOB_STORAGE = env.str("PORTICO_BLOB_STORAGE", default="filesystem")
PORTICO_BLOB_DIR = env.str("PORTICO_BLOB_DIR", default=str(VAR_DIR / "blobs"))
PORTICO_BLOB_S3_BUCKET = env.str("PORTICO_BLOB_S3_BUCKET", default="")
PORTICO_BLOB_S3_PREFIX = env.str("PORTICO_BLOB_S3_PREFIX", default="blobs")
# Empty: boto3 decides (AWS_ENDPOINT_URL, else AWS itself; AWS_DEFAULT_REGION).
PORTICO_BLOB_S3_ENDPOINT_URL = env.str("PORTICO_BLOB_S3_ENDPOINT_URL", default="")
PORTICO_BLOB_S3_REGION = env.str("PORTICO_BLOB_S3_REGION", default="")
BLOB_BACKENDS = {
    "filesystem": "django.core.files.storage.FileSystemStorage",
    "s3": "storages.backends.s3.S3Storage",
}
_blob_backend = BLOB_BACKENDS.get(PORTICO_BLOB_STORAGE, PORTICO_BLOB_STORAGE)
_blob_options: dict[str, object] = {"location": PORTICO_BLOB_DIR}
if _blob_backend == BLOB_BACKENDS["s3"]:
    _blob_options = {
        "bucket_name": PORTICO_BLOB_S3_BUCKET,
        "location": PORTICO_BLOB_S3_PREFIX.strip("/"),
        "endpoint_url": PORTICO_BLOB_S3_ENDPOINT_URL or None,
        "region_name": PORTICO_BLOB_S3_REGION or None,
        "default_acl": None,
        "querystring_auth": False,
    }
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "blobs": {"BACKEND": _blob_backend, "OPTIONS": _blob_options},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
MEDIA_ROOT = VAR_DIR / "media"
UPLOAD_DIR = VAR_DIR / "uploads"
FILE_UPLOAD_TEMP_DIR = None
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
PORTICO_MAX_UPLOAD_BYTES = env.int("PORTICO_MAX_UPLOAD_BYTES", default=2 * 1024**3)
# Request bodies are capped before Django reads them (console.security.body_limit): this much
# for any request, more only on the two upload routes below.
PORTICO_MAX_REQUEST_BYTES = env.int("PORTICO_MAX_REQUEST_BYTES", default=10 * 1024 * 1024)
PORTICO_UPLOAD_CHUNK_MAX_BYTES = env.int("PORTICO_UPLOAD_CHUNK_MAX_BYTES", default=64 * 1024**2)
# Multipart framing around an archive posted to the API in one piece.
PORTICO_MULTIPART_OVERHEAD_BYTES = 1024 * 1024
# What one user may hold in unfinished browser uploads at a time.
PORTICO_UPLOAD_MAX_OPEN_SESSIONS = env.int("PORTICO_UPLOAD_MAX_OPEN_SESSIONS", default=1000)
PORTICO_UPLOAD_MAX_OPEN_BYTES = env.int("PORTICO_UPLOAD_MAX_OPEN_BYTES", default=8 * 1024**3)

REDIS_URL = env.str("REDIS_URL", default="")


def filesystem_broker_options(var_dir: Path) -> dict[str, object]:
    """kombu's filesystem transport (the embedded default's broker), its folders under
    ``var_dir``."""
    return {
        "data_folder_in": str(var_dir / "broker" / "queue"),
        "data_folder_out": str(var_dir / "broker" / "queue"),
        "processed_folder": str(var_dir / "broker" / "processed"),
        "control_folder": str(var_dir / "broker" / "control"),
        "store_processed": False,
    }


CELERY_BROKER_URL = REDIS_URL or "filesystem://"
CELERY_BROKER_TRANSPORT_OPTIONS = {} if REDIS_URL else filesystem_broker_options(VAR_DIR)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# The cache holds DRF's throttle counts, so it must be one store for every console process: Redis
# when there is one, else a folder (the embedded default may run several console workers too).
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "portico-console",
        }
        if REDIS_URL
        else {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    )
}

CHANNEL_LAYERS = {
    "default": (
        {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its scheme makes unauthenticated requests answer 401, not 403.
        "console.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "EXCEPTION_HANDLER": "console.api.exceptions.api_exception_handler",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "console.api.throttling.AnonRateThrottle",
        "console.api.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env.str("PORTICO_API_ANON_RATE", default="60/min"),
        "user": env.str("PORTICO_API_USER_RATE", default="1200/min"),
    },
    # NOTE: the client's address is the connection's (uvicorn rewrites it from X-Forwarded-For
    # only for FORWARDED_ALLOW_IPS); DRF's default would trust any X-Forwarded-For a client sent.
    "NUM_PROXIES": 0,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Portico management API",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

# Load tests and tunings send their load with this perf_analyzer (else one on PATH, else the
# built-in Python client, whose own CPU use on a small machine lowers what it measures).
PORTICO_PERF_ANALYZER = env.str("PORTICO_PERF_ANALYZER", default="")
# The most one sample-input upload may hold (they are kept in the database, as JSON).
PORTICO_SAMPLE_INPUT_MAX_BYTES = env.int("PORTICO_SAMPLE_INPUT_MAX_BYTES", default=4 * 1024**2)

# Validation runs the candidate in a child process with these limits (see docs/security.md).
PORTICO_VALIDATION_TIME_LIMIT_S = env.int("PORTICO_VALIDATION_TIME_LIMIT_S", default=300)
PORTICO_VALIDATION_MEMORY_LIMIT_BYTES = env.int(
    "PORTICO_VALIDATION_MEMORY_LIMIT_BYTES", default=8 * 1024**3
)
PORTICO_VALIDATION_CPU_LIMIT_S = env.int("PORTICO_VALIDATION_CPU_LIMIT_S", default=1800)
PORTICO_VALIDATION_MAX_PROCESSES = env.int("PORTICO_VALIDATION_MAX_PROCESSES", default=256)
PORTICO_VALIDATION_MAX_OPEN_FILES = env.int("PORTICO_VALIDATION_MAX_OPEN_FILES", default=4096)
PORTICO_VALIDATION_MAX_FILE_BYTES = env.int(
    "PORTICO_VALIDATION_MAX_FILE_BYTES", default=2 * 1024**3
)
PORTICO_VALIDATION_SCRATCH_BYTES = env.int("PORTICO_VALIDATION_SCRATCH_BYTES", default=2 * 1024**3)
PORTICO_VALIDATION_STALE_GRACE_S = env.float("PORTICO_VALIDATION_STALE_GRACE_S", default=60)
# The module run as the check; only tests stand in a scripted one.
PORTICO_VALIDATION_CHECK_MODULE = "serving.check"
# The check runs in bubblewrap. "off" runs uploaded code unconfined: only an admin's explicit
# choice, shown as a red banner on every console page and recorded with each validation.
PORTICO_VALIDATION_SANDBOX = env.str("PORTICO_VALIDATION_SANDBOX", default="bwrap")
PORTICO_VALIDATION_BWRAP_PATH = env.str("PORTICO_VALIDATION_BWRAP_PATH", default="/usr/bin/bwrap")
# Extra variable names copied into the check's otherwise allow-listed environment.
PORTICO_VALIDATION_SANDBOX_PASS_ENV = env.list("PORTICO_VALIDATION_SANDBOX_PASS_ENV", default=[])
# Where the check runs: "bubblewrap" (in the worker, the default) or "kubernetes" (each check its
# own Job: no secrets, no token, no network; docs/deploy.md). Anything else means bubblewrap.
PORTICO_VALIDATION_RUNNER = env.str("PORTICO_VALIDATION_RUNNER", default="bubblewrap")
# The check Job's namespace ("" = the worker's own, from its pod) and image ("" = the worker's own
# image, read from its pod, so the check always runs the worker's code).
PORTICO_VALIDATION_KUBERNETES_NAMESPACE = env.str(
    "PORTICO_VALIDATION_KUBERNETES_NAMESPACE", default=""
)
PORTICO_VALIDATION_KUBERNETES_IMAGE = env.str("PORTICO_VALIDATION_KUBERNETES_IMAGE", default="")
PORTICO_VALIDATION_KUBERNETES_CPU = env.str("PORTICO_VALIDATION_KUBERNETES_CPU", default="2")
# How long the check pod may take to be scheduled and pull its image, on top of the time limit.
PORTICO_VALIDATION_KUBERNETES_START_TIMEOUT_S = env.int(
    "PORTICO_VALIDATION_KUBERNETES_START_TIMEOUT_S", default=300
)
# Where load tests and tunings serve the version: "worker" (a private loopback server beside the
# worker, the default) or "kubernetes" (each served config a Job on a node like the serving nodes,
# with the check Job's namespace, image and start timeout; docs/tuning.md). Anything else = worker.
PORTICO_LOADTEST_RUNNER = env.str("PORTICO_LOADTEST_RUNNER", default="worker")
PORTICO_LOADTEST_KUBERNETES_CPU = env.str("PORTICO_LOADTEST_KUBERNETES_CPU", default="2")
PORTICO_LOADTEST_KUBERNETES_MEMORY = env.str("PORTICO_LOADTEST_KUBERNETES_MEMORY", default="4Gi")
PORTICO_LOADTEST_KUBERNETES_GPUS = env.int("PORTICO_LOADTEST_KUBERNETES_GPUS", default=0)
# The serving Deployment's nodeSelector, tolerations and affinity as JSON (the manifests set it
# from the same values), so a load test measures on the kind of node that serves.
PORTICO_LOADTEST_KUBERNETES_PLACEMENT = env.json(
    "PORTICO_LOADTEST_KUBERNETES_PLACEMENT", default={}
)
# The most one load-test pod may live (it serves one config of a tuning, every run at it).
PORTICO_LOADTEST_KUBERNETES_DEADLINE_S = env.int(
    "PORTICO_LOADTEST_KUBERNETES_DEADLINE_S", default=3600
)

# Serving's HTTP API as the console reaches it (Try-it, and live stats when no replica heartbeats):
# a load balancer's URL in a scaled-out stack; unset, the live replicas' advertised URLs are used.
PORTICO_SERVING_HTTP_URL = env.str("PORTICO_SERVING_HTTP_URL", default="")

# A replica not heard from for this long is removed from the registry by the worker's sweep
# (its id names a process that is gone; a restarted replica heartbeats under a new id).
PORTICO_REPLICA_PRUNE_AFTER_S = env.int("PORTICO_REPLICA_PRUNE_AFTER_S", default=120)
# How often each worker sweeps: abandoned validations re-queued, stale replica rows pruned.
PORTICO_SWEEP_INTERVAL_S = env.float("PORTICO_SWEEP_INTERVAL_S", default=30.0)

# Every log line names the request it belongs to ("-" outside one): the id a 500 shows the user.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "console.security.request_id.RequestIdLogFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"}
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["request_id"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
