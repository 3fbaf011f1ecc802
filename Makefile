# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
## The runtime (requirements.txt) is all `make demo` installs; `make test` and `make lint` add
## the tests' and tools' packages and the LDAP extra (requirements-dev.txt), which builds
## python-ldap from source (docs/development.md).
INSTALLED := $(VENV)/.installed
DEV_INSTALLED := $(VENV)/.installed-dev
PIP := $(PY) -m pip --disable-pip-version-check install --quiet --no-compile

.PHONY: demo demo-telemetry test lint check bench-ingest bench-agent clean

$(INSTALLED): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	touch $@

$(DEV_INSTALLED): $(INSTALLED) requirements-dev.txt requirements-ldap.txt
	$(PIP) -r requirements-dev.txt
	touch $@

## Run the product on the embedded default: SQLite, no broker, demo data, simulated agents
## (on another port: `PORT=8001 make demo`). Mail is written to files under var/mail/ unless
## EMAIL_URL says otherwise; last month's statements can be approved at once (the settlement
## delay is 72 h otherwise).
## Logins are logged at WARNING (failures and lockouts), not three lines each.
demo: export LOGIN_LOG_LEVEL ?= WARNING
demo: export GPUQUOTA_SETTLEMENT_DELAY_HOURS ?= 0
demo: export EMAIL_URL ?= file://var/mail
## Links in the demo's mail point at the port it serves on; it comes from the demo
## organisation's domain (as its people's addresses), not from localhost.
demo: export GPUQUOTA_BASE_URL ?= http://127.0.0.1:$(PORT)
demo: export DEFAULT_FROM_EMAIL ?= gpuquota demo <gpuquota@example.org>
## Its agents report every 10 s: the hour in progress is recomputed every minute (not 5),
## so the figures move while you watch.
demo: export USAGE_ROLLUP_FRESHNESS_S ?= 60
## Reclaim on a shortened look-back (1 h) and grace (5 min), so the demo shows it.
demo: export RECLAIM_LOOKBACK_S ?= 3600
demo: export RECLAIM_GRACE_S ?= 300
## ... and without the guarded rule's history gate: the demo's history is hours, not days.
demo: export RECLAIM_HISTORY_DAYS ?= 0
## Lending on a shortened idle window (2 min), so an idle reserved GPU is lent soon after start.
demo: export LEND_AFTER_IDLE_S ?= 120
## `make demo SSO=1`: with a loopback OpenID Connect provider on 127.0.0.1:$(SSO_PORT) whose
## users log in through it (docs/sso.md, "The demo with a provider").
SSO ?= 0
SSO_PORT ?= 8900
## `make demo SLURM=1` (as root, with Debian's Slurm, munge and MariaDB): with the dev Slurm
## cluster gqdev as a demo cluster, started on GQ_SLURM_PORT_BASE and stopped with the demo;
## reservations become Slurm reservations and limits (docs/slurm.md, "The demo on the dev
## cluster").
SLURM ?= 0
DEMO_RUN ?= demo
DEMO_COMMAND = $(if $(filter 1,$(SSO)),demo_sso --provider-port $(SSO_PORT),$(if $(filter 1,$(SLURM)),slurm_demo,$(DEMO_RUN)))
## The loopback provider of `SSO=1` is a development package.
demo: $(if $(filter 1,$(SSO)),$(DEV_INSTALLED),$(INSTALLED))
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py $(DEMO_COMMAND) --addr 127.0.0.1:$(PORT)

## The demo with the Turing cluster reporting through fake dcgm-exporters scraped by Debian's
## Prometheus and the telemetry importer, instead of gpuquota's agent (docs/telemetry.md).
demo-telemetry:
	$(MAKE) demo DEMO_RUN="telemetry_demo --cluster turing"

## Run the whole test suite (PostgreSQL/Redis/browser tests need DATABASE_URL/REDIS_URL/chromium),
## in TEST_WORKERS pytest-xdist processes, a test file per worker at a time, longest first
## (each worker has its own test database and Redis database: tests/parallel.py). Three on
## two cores: about a quarter of the suite waits on daemons (Slurm, Prometheus, a live demo)
## and leaves a core to the third.
TEST_WORKERS ?= 3
test: $(DEV_INSTALLED)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(DEV_INSTALLED)
	$(VENV)/bin/ruff check .
	$(PY) manage.py makemigrations --check --dry-run

bench-ingest: $(DEV_INSTALLED)
	$(PY) bench/ingest.py

bench-agent: $(DEV_INSTALLED)
	$(PY) bench/agent.py

clean:
	rm -rf $(VENV) var staticfiles test-artifacts .pytest_cache
