# GPU Fault Responder — every command a developer or CI runs. `make help` lists them.
#
# Three virtual environments, each created from pinned requirements on first use:
#   .venv       the app, its tests and the sandbox   (requirements/dev.txt)
#   .venv-sam   the SAM CLI, which pins boto3 exactly (requirements/sam.txt)
#   .venv-scan  checkov and bandit, whose pins conflict with moto's and localstack's (requirements/scan.txt)
# (uv, which installs them, in .venv-uv from requirements/uv.txt)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
SAMVENV := .venv-sam
SCANVENV := .venv-scan
PY := $(VENV)/bin/python
SAM := $(SAMVENV)/bin/sam
# bandit scans what is deployed and the tools around it. tests/ is not scanned: asserts, fake credentials and
# subprocesses are what tests are made of, and none of it is deployed.
BANDIT_PATHS := layers/common/fault_responder functions sandbox local training benchmarks

export AWS_DEFAULT_REGION ?= us-east-1
export SAM_CLI_TELEMETRY := 0
export PYTHONDONTWRITEBYTECODE := 1

# `sam build` needs the Lambda runtime's Python on PATH. Use the newest of 3.13/3.12/3.11 that this
# machine has (pyenv keeps them under its root), and build for that runtime.
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
# (pyenv's shims are skipped: they fail unless that version is activated.)
BUILD_PYTHON := $(firstword $(foreach v,3.13 3.12 3.11,$(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(v).*/bin/python$(v)))),$(shell python$(v) -c 'import sys; print(sys.executable)' 2>/dev/null))))
BUILD_RUNTIME := python$(shell $(BUILD_PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null)
BUILD_PATH := $(dir $(BUILD_PYTHON)):$(PATH)
HOST_ARCH := $(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x86_64)
# Lambda's code directories are read-only: whatever the build output does not carry as bytecode is compiled
# again on every cold start. So compile it with the runtime's Python, as unchecked-hash .pyc files, which stay
# valid whatever modification times the deployment zip gives the sources.
COMPILE_BYTECODE := $(BUILD_PYTHON) -m compileall -q -f -j 0 --invalidation-mode unchecked-hash

STANDINS_HOST ?= 127.0.0.1
STANDINS_PORT ?= 8765
ROUTING_FILE ?= default.yaml
FN ?= AlertRouterFunction
EVENT ?= events/aws-docs/health-change-accelerated-compute-xid46.json
# The training auto-resume functions exist only when TrainingCapacityProviders is set (events/ uses gpu-training).
INVOKE_PARAMETERS ?= $(if $(filter AlertRouterFunction,$(FN)),,TrainingCapacityProviders=gpu-training)
DEMO_EVENTS := $(sort $(wildcard events/incident-xid79/*.json))

.PHONY: help setup lint format typecheck workflow validate scan pytest build build-quickstart build-host invoke smoke local-invoke local-up local-down local-image standins scenarios demo route fuzz test clean

help: ## List the commands
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

# uv installs the same pinned versions as pip would, downloading and unpacking in parallel, and compiles their
# bytecode on every core (pip did both one package at a time: dev.txt took 424 s with pip, 100 s with uv, on a busy
# 2-core machine). It lives in an environment of its own, created with pip from requirements/uv.txt.
UVVENV := .venv-uv
UV := $(UVVENV)/bin/uv
UV_INSTALL = $(UV) pip install --quiet --compile-bytecode --python

$(UV): requirements/uv.txt
	$(PYTHON) -m venv $(UVVENV)
	$(UVVENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/uv.txt
	touch $@

$(VENV)/.installed: requirements/dev.txt pyproject.toml | $(UV)
	$(PYTHON) -m venv $(VENV)
	$(UV_INSTALL) $(VENV)/bin/python -r requirements/dev.txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps --editable .
	touch $@

$(SAMVENV)/.installed: requirements/sam.txt | $(UV)
	$(PYTHON) -m venv $(SAMVENV)
	$(UV_INSTALL) $(SAMVENV)/bin/python -r requirements/sam.txt
	touch $@

$(SCANVENV)/.installed: requirements/scan.txt | $(UV)
	$(PYTHON) -m venv $(SCANVENV)
	$(UV_INSTALL) $(SCANVENV)/bin/python -r requirements/scan.txt
	touch $@

setup: $(VENV)/.installed $(SAMVENV)/.installed $(SCANVENV)/.installed ## Create the virtual environments from the pinned requirements; install the `fault-responder` command into .venv

lint: $(VENV)/.installed ## ruff (lint and formatting), and the import contracts between the packages (lint-imports)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: $(VENV)/.installed ## Apply ruff's formatting and safe fixes
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: $(VENV)/.installed ## mypy (strict on the layer package)
	$(VENV)/bin/mypy layers/common/fault_responder functions sandbox local statemachines

# statemachines/*.asl.json are generated from their Python sources: edit those, then run this (statemachines/README.md).
workflow: $(VENV)/.installed ## Write statemachines/*.asl.json from their sources (statemachines/*.py)
	$(PY) -m statemachines.build

validate: $(SAMVENV)/.installed $(VENV)/.installed ## sam validate --lint (the SAM templates), cfn-lint (forwarder.yaml), statelint
	$(SAM) validate --lint
	$(SAM) validate --lint --template quickstart.yaml
	$(SAMVENV)/bin/cfn-lint forwarder.yaml
	@if compgen -G "statemachines/*.asl.json" > /dev/null; then $(VENV)/bin/statelint --ignore=URI statemachines/*.asl.json; fi

# Every skipped check is skipped where it applies, with its reason: checkov's in the resource's Metadata in
# template.yaml and forwarder.yaml, bandit's as `# nosec BXXX  # reason` on the line (docs/security.md).
scan: $(SCANVENV)/.installed ## checkov on the templates, bandit on the code
	$(SCANVENV)/bin/checkov --file template.yaml --file forwarder.yaml --framework cloudformation --quiet --compact --skip-download
	$(SCANVENV)/bin/bandit --recursive --quiet $(BANDIT_PATHS)

# Four workers (pytest-xdist) on the two cores CI has, a test at a time each, a worker that runs out taking tests
# queued for the others (worksteal: one long test cannot leave a worker idle behind a long file). Many tests spend
# part of their time waiting (on a moto server or stand-in in another process, a subprocess, a timeout they test, a
# turn at the checkout), so more workers than cores fill the cores: the whole suite took 630 s with two and 558 s
# with three on one day; 970 s with three (the cores 186 % busy) and 858 s with four (195 %) back to back on another.
# The tests that build into the checkout or run its make targets take turns (tests/conftest.py: checkout_lock).
# PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 4
pytest: $(VENV)/.installed ## The test suite (unit, rules, integration, sandbox replays), on PYTEST_WORKERS workers
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist worksteal

# What a build is made from. A build newer than all of it is not run again: `sam build --cached` would still check
# every function and the layer, and compile all their bytecode again (seconds each time). The stamp is in the build
# folder, named for the runtime, so a build removed or made for another runtime is made again.
BUILD_INPUTS := Makefile template.yaml samconfig.toml $(shell find functions layers statemachines -not -path '*/__pycache__*')
BUILD_STAMP := .aws-sam/build/.built-$(BUILD_RUNTIME)
HOST_BUILD_STAMP := .aws-sam/build-host/.built-$(BUILD_RUNTIME)-$(HOST_ARCH)

build: $(BUILD_STAMP) ## sam build for Lambda (arm64) into .aws-sam/build (again only when its sources changed)

$(BUILD_STAMP): $(SAMVENV)/.installed $(BUILD_INPUTS)
	@test -n "$(BUILD_PYTHON)" || { echo "sam build needs python3.13, 3.12 or 3.11 on PATH or in pyenv" >&2; exit 1; }
	PATH="$(BUILD_PATH)" $(SAM) build --cached --parameter-overrides PythonRuntime=$(BUILD_RUNTIME)
	$(COMPILE_BYTECODE) .aws-sam/build
	touch $@

# The first deploy's build (README.md, "Deploy it"): quickstart.yaml, which deploys template.yaml as a nested stack
# with its defaults (so with Python 3.13), into .aws-sam/quickstart (samconfig.toml's quickstart environment).
build-quickstart: $(SAMVENV)/.installed ## sam build of quickstart.yaml (first deploy, alerting only) into .aws-sam/quickstart
	@test -n "$(BUILD_PYTHON)" || { echo "sam build needs python3.13, 3.12 or 3.11 on PATH or in pyenv" >&2; exit 1; }
	PATH="$(BUILD_PATH)" $(SAM) build --config-env quickstart
	$(COMPILE_BYTECODE) .aws-sam/quickstart

build-host: $(HOST_BUILD_STAMP) ## sam build for this machine's architecture into .aws-sam/build-host (for make invoke)

$(HOST_BUILD_STAMP): $(SAMVENV)/.installed $(BUILD_INPUTS)
	@test -n "$(BUILD_PYTHON)" || { echo "sam build needs python3.13, 3.12 or 3.11 on PATH or in pyenv" >&2; exit 1; }
	PATH="$(BUILD_PATH)" $(SAM) build --cached --cache-dir .aws-sam/cache-host -b .aws-sam/build-host \
		--parameter-overrides PythonRuntime=$(BUILD_RUNTIME) Architecture=$(HOST_ARCH)
	$(COMPILE_BYTECODE) .aws-sam/build-host
	touch $@

invoke: build-host $(VENV)/.installed ## Run FN from the build output against the sandbox: make invoke FN=<LogicalId> EVENT=<file>
	$(PY) -m sandbox invoke $(FN) $(EVENT) --build-dir .aws-sam/build-host \
		--parameter-overrides PythonRuntime=$(BUILD_RUNTIME) $(INVOKE_PARAMETERS)

# Every function of the stack with its sample (events/README.md), from the build, in one sandbox seeded with the world
# the samples name (events/world.yaml). In the workflow's order: each function finds what the ones before it made (the
# alert pipeline's incident of the fault, the claim, the task snapshot, the attempt), as in a run of the workflow.
SMOKE_INVOCATIONS := \
	AlertRouterFunction=events/resume/training-fault-xid79.json \
	ClaimFaultFunction=events/lambda/claim-fault.json \
	CheckGuardsFunction=events/lambda/check-guards.json \
	QuarantineInstanceFunction=events/lambda/quarantine-instance.json \
	FindJobsFunction=events/lambda/find-jobs.json \
	NotifyFunction=events/lambda/notify.json \
	PlanJobFunction=events/lambda/plan-job.json \
	RequestCheckpointFunction=events/lambda/request-checkpoint.json \
	CheckCheckpointFunction=events/lambda/check-checkpoint.json \
	StopJobFunction=events/lambda/stop-job.json \
	CheckTasksFunction=events/lambda/check-tasks.json \
	RelaunchJobFunction=events/lambda/relaunch-job.json \
	PlanRetryFunction=events/lambda/plan-retry.json \
	SweepFunction=events/schedule/sweep.json \
	ReconcileFunction=events/schedule/reconcile.json \
	SlackActionsFunction=events/function-url/slack-acknowledge.json \
	PagerDutyWebhookFunction=events/function-url/pagerduty-incident-acknowledged.json
SMOKE_WORLD := events/world.yaml

smoke: build-host $(VENV)/.installed ## Invoke every built function with its sample in the sandbox, in the samples' world
	$(PY) -m sandbox smoke $(SMOKE_INVOCATIONS) --world $(SMOKE_WORLD) --build-dir .aws-sam/build-host \
		--parameter-overrides PythonRuntime=$(BUILD_RUNTIME) TrainingCapacityProviders=gpu-training

# The same, in real Lambda containers (sam local), against moto and the stand-ins served where the containers reach
# them: local/ (local/__init__.py says what each part does). It needs root: it installs Debian's Docker engine when
# missing and starts a daemon, a bridge and firewall rules of its own, which it removes when it ends, however it ends.
# The functions are those the template creates; each needs a sample in SMOKE_INVOCATIONS. INVOCATIONS="F=EVENT ...":
# those functions only. REPORT=<file>: each invocation's outcome as JSON. LOCAL_LAMBDA_IMAGE=official|local: AWS's
# image or the equivalent built here (default: AWS's where it can be pulled).
# Invoked first with a plain `sam local invoke`, as README.md shows it (the others through sam local start-lambda).
LOCAL_PLAIN_INVOKE := AlertRouterFunction=events/sqs/alert-router-xid46.json
LOCAL_PARAMETERS := PythonRuntime=$(BUILD_RUNTIME) Architecture=$(HOST_ARCH) TrainingCapacityProviders=gpu-training
LOCAL_STACK := --world $(SMOKE_WORLD) --build-dir .aws-sam/build-host --sam $(SAM) --uv $(UV) \
	--parameter-overrides $(LOCAL_PARAMETERS)

local-invoke: build-host $(VENV)/.installed $(SAMVENV)/.installed ## Invoke every function in a Lambda container (sam local) with its sample, against the local stack
	$(PY) -m local invoke $(or $(INVOCATIONS),--every-function $(SMOKE_INVOCATIONS)) $(LOCAL_STACK) \
		--plain $(LOCAL_PLAIN_INVOKE) $(if $(REPORT),--report $(REPORT))

local-up: build-host $(VENV)/.installed $(SAMVENV)/.installed ## Start the local stack in the background for sam local invoke / start-lambda (README.md)
	$(PY) -m local up $(SMOKE_INVOCATIONS) $(LOCAL_STACK)

local-down: $(VENV)/.installed ## Stop the local stack, its Docker daemon, bridge and firewall rules
	$(PY) -m local down

local-image: $(VENV)/.installed | $(UV) ## Make the Lambda base image of local-invoke ready: AWS's, or built from Debian and PyPI (cached)
	$(PY) -m local image --runtime $(BUILD_RUNTIME) --architecture $(HOST_ARCH) --uv $(UV)

standins: $(VENV)/.installed ## Serve the Slack/PagerDuty stand-ins env.json points sam local invoke at, until Ctrl-C
	$(PY) -m sandbox standins --host $(STANDINS_HOST) --port $(STANDINS_PORT)

# One process for all of them (each from an empty account): a failed one is named on standard error, the rest still run.
scenarios: $(VENV)/.installed ## Run every scenario in scenarios/ in the sandbox and check its expectations
	$(PY) -m sandbox run scenarios/*.yaml --quiet
	@echo "ok  all $(words $(wildcard scenarios/*.yaml)) scenarios of scenarios/"

demo: $(VENV)/.installed ## Replay a whole GPU incident (XID 79 -> auto-repair drain -> instance gone) in the sandbox
	@mkdir -p reports
	@$(PY) -m sandbox replay $(DEMO_EVENTS) --report reports/demo.json

route: $(VENV)/.installed ## Which route and receivers events reach: make route [ROUTING_FILE=<file>] [AT=<ISO 8601>] [ORGANIZATION=<account>/<Region> [ACCOUNT_NAMES=<id>=<name>,...]] EVENT="<file>..."
	$(VENV)/bin/fault-responder route --routing-file $(ROUTING_FILE) $(if $(AT),--at $(AT)) \
		$(if $(ORGANIZATION),--organization $(ORGANIZATION)) $(if $(ACCOUNT_NAMES),--account-names $(ACCOUNT_NAMES)) $(EVENT)

fuzz: $(VENV)/.installed ## Mutated envelopes through the real router, tallied: make fuzz N=10000 [SEED=1]
	$(PY) -m sandbox fuzz --count $(or $(N),1000) --seed $(or $(SEED),1)

# The three environments are created side by side (downloads and disk more than CPU); then the checks that do not run
# the suite, and the build local-invoke runs (each is one process, mostly on one core: ruff, mypy, sam validate,
# checkov and bandit, sam build), two at a time beside the Lambda image of local-invoke while it is made (the Docker
# engine installed, debootstrap and the image's packages downloaded: network and disk more than CPU), three at a time
# once it is (a few seconds, when it is cached from an earlier run); then the suite beside local-invoke, which invokes
# one function after another in its containers (run alone after the suite, it left a core idle); then `sam build` for
# Lambda, which the suite's documentation test has made by then. The build local-invoke runs is made first so that it
# never reads a build being made: the suite's `make build-host` finds it up to date, and the suite's other builds (sam
# builds, one at a time: they share .aws-sam/deps) write elsewhere. A step that fails stops those after it; the suite
# and local-invoke both finish before the failure of either is reported. The suite's own local runs (tests/local, the
# documentation's `make local-up`) wait for local-invoke's: one Docker daemon of the runs' at a time on a machine.
# `make smoke` is not run here: local-invoke invokes the same built functions with the same samples in the same world,
# with the same boto3 as the Lambda runtime's, in real Lambda containers, and fails on more (an error object, a failed
# SQS record); the suite runs the samples in that world too (tests/sandbox/test_smoke.py).
test: ## Everything CI runs
	$(MAKE) --no-print-directory -j3 setup
	$(MAKE) --no-print-directory -j3 --output-sync=target local-image lint typecheck validate scan build-host
	$(MAKE) --no-print-directory -j2 --output-sync=target pytest local-invoke
	$(MAKE) --no-print-directory build
	@echo "make test: all checks passed"

clean: ## Remove build output and caches (keeps the virtual environments)
	rm -rf .aws-sam reports .pytest_cache .mypy_cache .ruff_cache
