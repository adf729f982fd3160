# agent_jobs — every target installs what it needs into ./.venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# Benchmarks and `make run` use real services; override on the command line if yours differ.
PG_URL ?= postgresql://postgres@127.0.0.1:5432
REDIS_URL ?= redis://127.0.0.1:6379
# The benchmarks' workers sign tool credentials too: the same tool secret as the services'.
BENCH_ENV = AGENT_JOBS_DATABASE_URL=$(PG_URL)/agent_jobs_bench AGENT_JOBS_BROKER_URL=$(REDIS_URL)/5 \
	AGENT_JOBS_TOOL_SECRET="$${AGENT_JOBS_TOOL_SECRET:-$$(cat $(TOOL_SECRET_FILE))}"

# `make sim / api / worker / beat / flower` run the real thing on local Postgres and Redis.
# The secrets are yours: AGENT_JOBS_JWT_SECRET / AGENT_JOBS_TOOL_SECRET if exported, else ones
# generated on first use into .venv (never a well-known default: the API would accept anyone's
# tokens).
API_URL ?= http://127.0.0.1:8000
SECRET_FILE := $(VENV)/jwt-secret
TOOL_SECRET_FILE := $(VENV)/tool-secret
SERVICE_ENV := AGENT_JOBS_DATABASE_URL=$(PG_URL)/agent_jobs AGENT_JOBS_BROKER_URL=$(REDIS_URL)/0 \
	AGENT_JOBS_JWT_SECRET="$${AGENT_JOBS_JWT_SECRET:-$$(cat $(SECRET_FILE))}" \
	AGENT_JOBS_TOOL_SECRET="$${AGENT_JOBS_TOOL_SECRET:-$$(cat $(TOOL_SECRET_FILE))}"

.PHONY: install demo demo-example demo-agent demo-helpdesk test eval lint format bench bench-transitions bench-fairness bench-sweep bench-scale \
	bench-cost bench-peers bench-platform bench-recovery bench-history bench-outage \
	chaos simulate db sim api worker beat flower token schemathesis compose-config clean help

help:
	@echo "make install   create .venv and install agent_jobs with its dev tools"
	@echo "make demo      the payout and refund incidents end to end, embedded (no services needed)"
	@echo "make demo-agent   your own agent: the order-cancellation example, end to end, embedded"
	@echo "make demo-helpdesk   an agent with two effects (OpenAPI and MCP tools), embedded"
	@echo "make test      the test suite in TEST_JOBS=3 processes (Postgres/Redis tests skip if those are down)"
	@echo "make eval      the golden-refund and safety eval suites (5 runs a case; exit status = gate)"
	@echo "make lint      ruff and mypy --strict"
	@echo "make bench     the runtime's three benchmarks on Postgres + Redis"
	@echo "make bench-scale   scale and fairness: 1000 tenants, a noisy neighbour, cost-weighted shares"
	@echo "make bench-cost    step cost: bench peers (Celery chain, DBOS), platform time of a refund, recovery, 10M rows of history"
	@echo "make chaos     hundreds of tasks, workers SIGKILLed, broker flushed: lost/duplicates"
	@echo "make simulate  the deterministic simulator, long run (SCHEDULES=20000 SEED=<from the clock> DATABASE=sqlite|postgres)"
	@echo "make bench-outage   Postgres away 10 s, Redis killed and restarted empty: how soon work moves"
	@echo "make db        create and migrate the local database (make api does it too)"
	@echo "make sim | api | worker | beat | flower   run the services on local Postgres and Redis"
	@echo "make token TENANT=acme SUB=alice [ROLE=approver]   a bearer token for make api"
	@echo "make schemathesis   fuzz a running API (make api) against its OpenAPI document"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/agent-jobs demo example
	$(BIN)/agent-jobs demo refund

demo-example: $(STAMP)
	$(BIN)/agent-jobs demo example

# Your own agent: the order-cancellation example (examples/order_cancel), embedded.
demo-agent: $(STAMP)
	$(BIN)/python -m examples.order_cancel

# Two effects from two tool sources: the IT helpdesk example (examples/helpdesk), embedded.
demo-helpdesk: $(STAMP)
	$(BIN)/python -m examples.helpdesk

# The suite runs in TEST_JOBS processes (pytest-xdist), each with a Redis database of its own
# (the test one, then the next ones: 9, 10, 11 by default); TEST_JOBS=1 runs it in one.
TEST_JOBS ?= 3
test: $(STAMP)
	$(BIN)/pytest -q $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS))

eval: $(STAMP)
	$(BIN)/agent-jobs eval --suite golden-refund --json eval-golden.json --html eval-golden.html
	$(BIN)/agent-jobs eval --suite safety --json eval-safety.json --html eval-safety.html

lint: $(STAMP)
	$(BIN)/ruff check agent_jobs examples tests db celeryconfig.py
	$(BIN)/ruff format --check agent_jobs examples tests db celeryconfig.py
	$(BIN)/mypy
	$(BIN)/mypy celeryconfig.py

format: $(STAMP)
	$(BIN)/ruff format agent_jobs examples tests db celeryconfig.py
	$(BIN)/ruff check --fix agent_jobs examples tests db celeryconfig.py

bench: bench-transitions bench-fairness bench-sweep

bench-transitions: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench transitions --tasks 20 --steps 200

bench-fairness: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench fairness --tenants 20 --backlog 2000

bench-sweep: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench sweep --rows 1000000

# the three of the scale issue, one after the other in one session
bench-scale: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench fairness --tenants 1000 --active 50
	$(BENCH_ENV) $(BIN)/agent-jobs bench noisy
	$(BENCH_ENV) $(BIN)/agent-jobs bench cost-fairness

# step cost (issue 14): the peers side by side, a refund task's own platform time, recovery
# after a SIGKILL with step acks in memory and in the broker, 10M rows of history against an
# empty database (seeds 2.8 GB once, minutes; kept for the next run)
bench-cost: bench-peers bench-platform bench-recovery bench-history

bench-peers: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench peers

bench-platform: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench platform --tasks 30

bench-recovery: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench recovery

bench-history: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench history

bench-outage: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench outage

# The deterministic simulator (no services): SCHEDULES schedules from SEED (default: the clock's).
SCHEDULES ?= 20000
simulate: $(STAMP)
	$(BIN)/agent-jobs simulate --schedules $(SCHEDULES) --jobs 2 $(if $(SEED),--seed $(SEED),) \
		$(if $(filter postgres,$(DATABASE)),--database postgres --database-url $(PG_URL)/postgres,)

chaos: $(STAMP) $(TOOL_SECRET_FILE)
	$(BENCH_ENV) $(BIN)/agent-jobs bench chaos --tasks 300

$(VENV)/%-secret: | $(STAMP)
	@umask 077 && $(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(32))' > $@
	@$(BIN)/python -c 'import os, sys; n = f"AGENT_JOBS_{sys.argv[1].upper()}_SECRET"; os.environ.get(n) or print(f"generated a secret in {sys.argv[2]} (or export {n})", file=sys.stderr)' $* $@

db: $(STAMP) $(SECRET_FILE) $(TOOL_SECRET_FILE)
	$(SERVICE_ENV) $(BIN)/python -c "from agent_jobs.store.admin import ensure_database as e; import os; e(os.environ['AGENT_JOBS_DATABASE_URL'])"
	$(SERVICE_ENV) $(BIN)/agent-jobs db upgrade

# The business-systems simulator the refund workflow calls (AGENT_JOBS_SYSTEMS_URL's default).
sim: $(STAMP)
	$(BIN)/agent-jobs sim serve --port 8090

api: db
	$(SERVICE_ENV) $(BIN)/agent-jobs api --host 127.0.0.1 --port 8000

worker: $(STAMP) $(SECRET_FILE) $(TOOL_SECRET_FILE)
	$(SERVICE_ENV) $(BIN)/agent-jobs worker --metrics-port 9808 --metrics-addr 127.0.0.1 -- --loglevel=INFO

beat: $(STAMP) $(SECRET_FILE) $(TOOL_SECRET_FILE)
	$(SERVICE_ENV) $(BIN)/celery -A agent_jobs beat --loglevel INFO --schedule $(VENV)/celerybeat-schedule

# Behind basic auth when FLOWER_BASIC_AUTH=user:password is exported; otherwise unauthenticated
# and served on 127.0.0.1 only.
flower: $(STAMP) $(SECRET_FILE) $(TOOL_SECRET_FILE)
	$(SERVICE_ENV) $(BIN)/agent-jobs flower $(if $(FLOWER_BASIC_AUTH),,--unauthenticated) -- --port=5555 --address=127.0.0.1

TENANT ?= acme
SUB ?= $(or $(USER),me)
token: $(STAMP) $(SECRET_FILE) $(TOOL_SECRET_FILE)
	@$(SERVICE_ENV) $(BIN)/agent-jobs token --tenant $(TENANT) --sub $(SUB) $(if $(ROLE),--role $(ROLE))

schemathesis: $(STAMP) $(SECRET_FILE) $(TOOL_SECRET_FILE)
	SCHEMATHESIS_TOKEN="$$($(SERVICE_ENV) $(BIN)/agent-jobs token --tenant st --sub schemathesis --role approver)" \
	  $(BIN)/schemathesis --config-file deploy/schemathesis.toml run $(API_URL)/openapi.json --checks all

compose-config:
	docker compose config --quiet

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
