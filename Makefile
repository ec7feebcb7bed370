# Every target sets itself up on a fresh machine: virtualenv, packages, the Fashion-MNIST files.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.pflkit-installed
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
JUNIT4 := /usr/share/java/junit4.jar
RUNS   ?= runs
JOBS   ?= 2

.PHONY: setup demo test test-gpu gpu-check lint bench-fedavg bench-overhead clean

# Everything the tests need (every extra), at the tested versions of constraints.txt.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The server tests start their own PostgreSQL (package `postgresql`, any version; this file is
# in its postgresql-common dependency): a separate target so machines that already have the
# dataset get it too.
PGSERVER := /usr/bin/pg_ctlcluster

$(FMNIST) $(PGSERVER):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends dataset-fashion-mnist postgresql

$(JUNIT4):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq junit4 openjdk-17-jdk-headless

setup: $(STAMP) $(FMNIST) $(PGSERVER) $(JUNIT4)

demo: setup
	rm -rf $(RUNS)/demo
	$(BIN)/pfl-sim --config docs/configs/demo.toml --out $(RUNS)/demo
	$(BIN)/pfl-export --run $(RUNS)/demo --client 17 --lambda 0.3
	$(BIN)/pfl-export classify $(RUNS)/demo/exports/client17 --count 8

test: setup android-core-test android-app-check
	$(BIN)/python -m pytest -q -n $(JOBS) tests

# The device-sensitive tests on a CUDA GPU (skipped, with the reason, on a machine without one).
test-gpu: setup
	$(BIN)/python -m pytest -q -rs -m gpu tests

# Whenever a GPU is at hand: test-gpu's tests and bench-scale's GPU section (tests/gpu_check.sh;
# on an offline GPU machine: bash .gpu/run.sh bash tests/gpu_check.sh).
gpu-check: setup
	PYTHON=$(BIN)/python bash tests/gpu_check.sh

# The Android demo's Java core on the host (javac + JUnit 4; no Gradle, no network); its
# federated-client tests start a real pfl-server from $(VENV).
android-core-test: $(STAMP) $(JUNIT4)
	PFLKIT_VENV=$(VENV) android-demo/core/run-tests.sh

# The Kotlin app compiled against signature stubs of the Android APIs (no Android SDK here).
android-app-check: $(STAMP) $(JUNIT4)
	PFLKIT_VENV=$(VENV) android-demo/tools/kotlin-check/check.sh

lint: setup
	$(BIN)/ruff check sdk server export tests benchmarks

bench-fedavg: setup
	cd benchmarks && ../$(BIN)/python bench_fedavg.py

bench-overhead: setup
	cd benchmarks && ../$(BIN)/python bench_overhead.py

# issue 22: a batched round's framework work per client at 1000 clients (ROUNDS, default 5)
.PHONY: bench-client-overhead
bench-client-overhead: setup
	cd benchmarks && ../$(BIN)/python bench_client_overhead.py

# issue 22: the sequential executor's cost per client and per step vs the plain loop (ROUNDS, default 5)
.PHONY: bench-sequential-overhead
bench-sequential-overhead: setup
	cd benchmarks && ../$(BIN)/python bench_sequential_overhead.py

clean:
	rm -rf $(RUNS) build dist *.egg-info

# Benchmarks owned by later issues (each script documents its settings).
.PHONY: bench-baselines bench-superfed bench-superfed-noise bench-fedrod bench-fedrod-new-clients \
        bench-pflmoe bench-export bench-server android-core-test android-app-check
bench-baselines: setup
	cd benchmarks && ../$(BIN)/python bench_baselines.py
bench-superfed: setup
	cd benchmarks && ../$(BIN)/python bench_superfed.py
bench-superfed-noise: setup
	cd benchmarks && ../$(BIN)/python bench_superfed_noise.py
bench-fedrod: setup
	cd benchmarks && ../$(BIN)/python bench_fedrod.py
bench-fedrod-new-clients: setup
	cd benchmarks && ../$(BIN)/python bench_fedrod_new_clients.py
bench-pflmoe: setup
	cd benchmarks && ../$(BIN)/python bench_pflmoe.py
bench-export: setup
	cd benchmarks && ../$(BIN)/python bench_export.py
bench-server: setup
	cd benchmarks && ../$(BIN)/python bench_server.py

# ROUNDS, METHODS, EPSILONS, CLIENTS, EVAL_CLIENTS from the environment (bench_privacy.py)
.PHONY: bench-privacy
bench-privacy: setup
	cd benchmarks && ../$(BIN)/python bench_privacy.py

# Flower for bench-scale lives in its own venv (never a pflkit dependency); a .pth file lets it
# import this checkout's torch and pflkit for the same model and partition.
FLOWER_VENV := benchmarks/.venv-flower
$(FLOWER_VENV)/.installed:
	$(PYTHON) -m venv $(FLOWER_VENV)
	$(FLOWER_VENV)/bin/pip install -q "flwr[simulation]==1.42.0"
	echo "import site; site.addsitedir('$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> "$$($(FLOWER_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/pflkit-checkout.pth"
	touch $@

.PHONY: bench-scale
bench-scale: setup $(FLOWER_VENV)/.installed
	cd benchmarks && ../$(BIN)/python bench_scale.py

.PHONY: bench-natural
bench-natural: setup
	cd benchmarks && ../$(BIN)/python bench_natural.py

.PHONY: bench-secagg
bench-secagg: setup
	cd benchmarks && ../$(BIN)/python bench_secagg.py

# Accuracy part first (it trains the runs), then the speed part alone on the machine: it holds
# a lock file (flock) for its timings; on a shared machine point SPEED_LOCK at the lock that the
# machine's other timing jobs take.
SPEED_LOCK ?= $(or $(TMPDIR),/tmp)/pflkit-speed.lock
.PHONY: bench-on-device
bench-on-device: setup
	cd benchmarks && ../$(BIN)/python bench_on_device.py
	cd benchmarks && SPEED=1 flock $(SPEED_LOCK) ../$(BIN)/python bench_on_device.py

.PHONY: bench-report
bench-report: setup
	$(BIN)/python benchmarks/collect.py
