# imagekit's commands. Every target sets up what it needs; a fresh clone needs only Python.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.imagekit-installed
GOLDEN := tests/golden
CACHE ?= $(HOME)/.cache/imagekit
# The CPU demo: torch's CPU wheel and the full flavour's packages, for Debian 12's Python.
WHEELHOUSE ?= $(CACHE)/wheelhouse-cpu
DEMO_MATRIX := examples/cpu.yaml
DEMO_BASE := imagekit-base/debian:bookworm
DEMO_PYTHON := 3.11.2
DEMO_PACKAGES := torch==2.13.0 numpy jupyterlab==4.6.6 tensorboard==2.21.0
# The CUDA example: torch 2.14.1 for CUDA 13.0 with its nvidia-*-cu13 wheels (about 3 GB), the
# full flavour's packages and the CUDA 13.0 compiler wheels (as compat.yaml lists them).
CUDA_WHEELHOUSE ?= $(CACHE)/wheelhouse-cu130
CUDA_MATRIX := examples/cuda-local.yaml
CUDA_PACKAGES := torch==2.14.1 jupyterlab==4.6.6 tensorboard==2.21.0 \
	'nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-crt==13.0.*' 'nvidia-nvvm==13.0.*' \
	'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*'
# Its neighbour for the bench's layers section: torch 2.13.0 for CUDA 13.0 (PyPI's), whose
# wheels share the CUDA toolkit, cuSPARSELt and NVSHMEM with 2.14.1's.
NEIGHBOUR_WHEELHOUSE ?= $(CACHE)/wheelhouse-cu130-torch2.13.0
NEIGHBOUR_PACKAGES := torch==2.13.0
# The engines the bench's speed section compares on: the default one, Debian 12's Docker 20.10
# boxed, and Docker 26 boxed with each image store (as the engine contract runs them).
BENCH_ENGINES ?= host docker20 docker26-classic docker26-containerd
# The same example for linux/arm64 (Grace): PyPI's aarch64 torch is that CUDA 13.0 build. Its
# wheels carry manylinux tags from 2014 (2.17) to 2.28, and pip matches --platform exactly, so
# every tag Debian 12's glibc (2.36) runs is named. uv's aarch64 wheel is the installer the
# builder stage runs under emulation (the host's uv is an x86_64 program).
ARM64_WHEELHOUSE ?= $(CACHE)/wheelhouse-cu130-arm64
ARM64_BASE := imagekit-base/debian:bookworm-arm64
ARM64_PLATFORMS := --platform manylinux2014_aarch64 \
	$(foreach v,17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36,\
		--platform manylinux_2_$(v)_aarch64)

.PHONY: venv lint types unit test goldens docs schema check clean engine base wheelhouse demo bench browser \
	wheelhouse-cuda demo-cuda test-cuda bench-cuda wheelhouse-arm64

$(STAMP): pyproject.toml scripts/ensure-venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/ensure-venv.sh

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# The room contract: the kernel imports no feature, a feature only those it declares and
	@# never an adapter, and its use cases reach the world only through the ports.
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/project/test_layers.py
	@# The shape ratchet: its figures may only go down (scripts/shape-limits.toml).
	$(BIN)/python scripts/shape.py
	@# The generated reference pages match the code they are made from.
	$(BIN)/python scripts/gen_reference.py --check

## make docs: regenerate docs/reference/ (CLI, labels, records, matrix schema) from the code.

docs: $(STAMP)
	$(BIN)/python scripts/gen_reference.py

types: $(STAMP)
	@# The shared test fakes are checked against the ports they stand in for.
	$(BIN)/mypy imagekit tests/fakes.py

unit: $(STAMP)
	$(BIN)/pytest -m "not integration and not gpu and not cuda and not arm64"

## make engine: a Docker engine that answers (installed and started as root on Debian/Ubuntu).
engine:
	@scripts/ensure-engine.sh

## make base: the demo's Debian 12 base, bootstrapped locally unless the engine has it.
base: $(STAMP) engine
	@# A base from before docs were left out, before it took the security suite's fixes, before
	@# it named the indexes it was made from, or before its time was its root filesystem's (its
	@# io.imagekit.base.docs, base.security, base.indexes and base.made labels: the indexes are
	@# build provenance; with base.made, bootstrapping again while no suite changed gives the
	@# same image, as security.yml does), is made again.
	@test "$$(docker image inspect -f '{{ index .Config.Labels "io.imagekit.base.docs" }} {{ \
		index .Config.Labels "io.imagekit.base.security" }} {{ if index .Config.Labels \
		"io.imagekit.base.indexes" }}indexed{{ end }} {{ if index .Config.Labels \
		"io.imagekit.base.made" }}made{{ end }}' $(DEMO_BASE) 2>/dev/null)" = \
		"no bookworm-security indexed made" || \
		$(BIN)/imagekit base bootstrap --suite bookworm --tag $(DEMO_BASE)

## make base-arm64: the Debian 12 base for linux/arm64, bootstrapped under emulation.
.PHONY: base-arm64
base-arm64: $(STAMP) engine
	@test "$$(docker image inspect -f '{{ index .Config.Labels "io.imagekit.base.docs" }}' \
		$(ARM64_BASE) 2>/dev/null)" = no || \
		$(BIN)/imagekit base bootstrap --suite bookworm --arch arm64 --tag $(ARM64_BASE)

## make wheelhouse: the demo's wheels, downloaded once into $(WHEELHOUSE).
wheelhouse: $(WHEELHOUSE)/.complete

$(WHEELHOUSE)/.complete: | $(STAMP)
	mkdir -p $(WHEELHOUSE)
	$(BIN)/pip download --quiet --disable-pip-version-check --only-binary=:all: \
		--python-version $(DEMO_PYTHON) --dest $(WHEELHOUSE) $(DEMO_PACKAGES)
	touch $@

## make wheelhouse-cuda: the CUDA example's wheels from the local indexes, downloaded once.
wheelhouse-cuda: $(CUDA_WHEELHOUSE)/.complete

$(CUDA_WHEELHOUSE)/.complete: | $(STAMP)
	mkdir -p $(CUDA_WHEELHOUSE)
	$(BIN)/pip download --quiet --disable-pip-version-check --only-binary=:all: \
		--python-version $(DEMO_PYTHON) --dest $(CUDA_WHEELHOUSE) $(CUDA_PACKAGES)
	touch $@

## make wheelhouse-cuda-neighbour: torch 2.13.0's CUDA 13.0 wheels from PyPI (about 3 GB), the
## CUDA example's neighbouring release, for the bench's layers section.
wheelhouse-cuda-neighbour: $(NEIGHBOUR_WHEELHOUSE)/.complete

# PyPI itself, past this machine's local indexes, links and cap, from its configuration files or
# its environment (they hold torch 2.13.0's CPU build): PyPI's torch 2.13.0 for Linux x86_64 is
# the CUDA 13.0 build.
$(NEIGHBOUR_WHEELHOUSE)/.complete: | $(STAMP)
	mkdir -p $(NEIGHBOUR_WHEELHOUSE)
	PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_EXTRA_INDEX_URL= PIP_CONSTRAINT= \
		PIP_CERT=$${PIP_CERT:-$$($(BIN)/pip config get global.cert 2>/dev/null)} \
		$(BIN)/pip download --quiet --disable-pip-version-check --only-binary=:all: \
		--index-url https://pypi.org/simple --python-version $(DEMO_PYTHON) \
		--dest $(NEIGHBOUR_WHEELHOUSE) $(NEIGHBOUR_PACKAGES)
	touch $@

## make wheelhouse-arm64: the CUDA example's linux/arm64 wheels from PyPI, downloaded once.
wheelhouse-arm64: $(ARM64_WHEELHOUSE)/.complete

$(ARM64_WHEELHOUSE)/.complete: | $(STAMP)
	mkdir -p $(ARM64_WHEELHOUSE)
	$(BIN)/pip download --quiet --disable-pip-version-check --only-binary=:all: \
		$(ARM64_PLATFORMS) --python-version $(DEMO_PYTHON) --dest $(ARM64_WHEELHOUSE) \
		$(CUDA_PACKAGES) "uv==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("uv"))')"
	touch $@

## make demo-cuda: build the CUDA example (slim and full) and verify it without a GPU.
demo-cuda: $(STAMP) base wheelhouse-cuda
	$(BIN)/imagekit build --matrix $(CUDA_MATRIX) --platform linux/amd64 \
		--wheelhouse $(CUDA_WHEELHOUSE)
	$(BIN)/imagekit verify --matrix $(CUDA_MATRIX) --platform linux/amd64
	@# doctor exits 7 where these images cannot use the GPUs (here: no GPU); that is a finding.
	$(BIN)/imagekit doctor --matrix $(CUDA_MATRIX) --platform linux/amd64 || [ $$? -eq 7 ]

## make demo-arm64: the CUDA example for linux/arm64 (GH200/GB200), built and verified to the
## `cpu` level here under emulation (qemu-user): base, wheelhouse, slim and full.
.PHONY: demo-arm64
demo-arm64: $(STAMP) base-arm64 wheelhouse-arm64
	$(BIN)/imagekit build --matrix $(CUDA_MATRIX) --platform linux/arm64 \
		--wheelhouse $(ARM64_WHEELHOUSE)
	$(BIN)/imagekit verify --matrix $(CUDA_MATRIX) --platform linux/arm64

## make test-arm64: the tests that build and verify the arm64 CUDA images under emulation, and
## publish them with the amd64 ones as one index (not part of make test: most of an hour).
.PHONY: test-arm64
test-arm64: base base-arm64 wheelhouse-cuda wheelhouse-arm64
	IMAGEKIT_CUDA_WHEELHOUSE=$(CUDA_WHEELHOUSE) IMAGEKIT_ARM64_WHEELHOUSE=$(ARM64_WHEELHOUSE) \
		IMAGEKIT_DEMO_BASE=$(DEMO_BASE) IMAGEKIT_ARM64_BASE=$(ARM64_BASE) $(BIN)/pytest -m arm64

## make test-cuda: the tests that build and verify the CUDA images (not part of make test).
test-cuda: base wheelhouse-cuda
	IMAGEKIT_CUDA_WHEELHOUSE=$(CUDA_WHEELHOUSE) IMAGEKIT_DEMO_BASE=$(DEMO_BASE) \
		$(BIN)/pytest -m cuda

## make demo: build the CPU example from nothing, verify, audit and publish it, and print the
## path of the run page (results/site/index.html).
demo: $(STAMP) base wheelhouse
	$(BIN)/imagekit build --matrix $(DEMO_MATRIX) --wheelhouse $(WHEELHOUSE)
	$(BIN)/imagekit verify --matrix $(DEMO_MATRIX) --nodes 2 && $(MAKE) --no-print-directory demo-publish
	@# The security fixes the images lack, read from Debian's security suite (none on the day the
	@# base is made). Exit 9, images lacking fixes, is the finding the page shows, not a fault.
	$(BIN)/imagekit audit --matrix $(DEMO_MATRIX) || [ $$? = 9 ]
	@# The runs as a page (docs/reference/site.md): its path is the last line.
	@echo "the run page, to open in a browser:" >&2
	@$(BIN)/imagekit report --html results/site

## make demo-publish: publish the verified CPU example to a throwaway local registry, signed with
## a throwaway cosign key, and check each image with `imagekit attest verify` (the end of demo).
.PHONY: demo-publish
demo-publish: $(STAMP) engine
	BIN=$(BIN) MATRIX=$(DEMO_MATRIX) scripts/demo-publish.sh

# Host-mode probe tests run in the test venv: the CPU torch from the demo wheelhouse.
# uv (imagekit's own dependency): about 10 s where pip takes 22 s.
$(VENV)/.torch-installed: $(WHEELHOUSE)/.complete
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-index \
		--find-links $(WHEELHOUSE) torch==2.13.0
	touch $@

## make browser: headless Chromium for the JupyterLab browser test (root on Debian/Ubuntu).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "make browser: installing chromium" >&2; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
		else echo "make browser: install chromium (the JupyterLab browser test needs it)" >&2; exit 1; fi; }

## make test-engines: what the engine-contract tests start besides the default engine (Podman 4.3;
## the boxes of Docker 26 and Podman 5 are made by the tests themselves).
.PHONY: test-engines
test-engines:
	@scripts/ensure-test-engines.sh

## make test: lint, types, compat.yaml against the wheels on hand, and the whole test suite (integration tests on a real engine, and
## the engine contract against boxed Docker 26 (both stores), Podman 4.3 and boxed Podman 5,
## which the tests start).
test: lint types base wheelhouse browser test-engines $(VENV)/.torch-installed
	@# compat.yaml against the torch wheels this machine has (a wheelhouse not made is skipped).
	$(BIN)/imagekit compat verify --wheelhouse $(WHEELHOUSE) --wheelhouse $(CUDA_WHEELHOUSE) \
		--wheelhouse $(ARM64_WHEELHOUSE)
	IMAGEKIT_WHEELHOUSE=$(WHEELHOUSE) IMAGEKIT_DEMO_BASE=$(DEMO_BASE) PYTEST=$(BIN)/pytest \
		IMAGEKIT_REQUIRE_BROWSER=1 scripts/run-tests.sh

## make check: validate matrix.yaml and lint every rendered Dockerfile.
check: $(STAMP)
	$(BIN)/imagekit check

## make goldens: re-render the golden Dockerfiles after an intended template change.
# Goldens keep only rendered files (Dockerfile, requirements*.txt, imagekit-plan.json); the
# static files that come verbatim from templates/ are swapped for a static.sha256 manifest
# (`<sha256>  <name>`), which tests/unit/build/test_render.py checks against the templates.
goldens: $(STAMP)
	rm -rf $(GOLDEN)/docker $(GOLDEN)/buildkit
	$(BIN)/imagekit render --matrix $(GOLDEN)/matrix.yaml --out $(GOLDEN)/docker --no-ca-cert
	$(BIN)/imagekit render --matrix $(GOLDEN)/matrix.yaml --out $(GOLDEN)/buildkit --no-ca-cert --buildkit
	$(BIN)/python -c 'import sys, pathlib, imagekit.adapters.contexts as c; \
		[c.swap_static_for_manifest(pathlib.Path(d)) for d in sys.argv[1:]]' \
		$(GOLDEN)/docker $(GOLDEN)/buildkit

## make schema: regenerate the JSON Schemas of matrix.yaml and of a results record.
schema: $(STAMP)
	$(BIN)/imagekit schema --out imagekit/data/matrix.schema.json
	$(BIN)/imagekit schema --results --out imagekit/data/results.schema.json

clean:
	rm -rf $(VENV) out results .mypy_cache .ruff_cache .pytest_cache .hypothesis

## make bench: build speed and size figures, measured side by side (a few hours on 2 cores).
bench: $(STAMP) base wheelhouse wheelhouse-cuda wheelhouse-cuda-neighbour
	$(BIN)/python scripts/bench.py --wheelhouse $(WHEELHOUSE) --base $(DEMO_BASE) \
		--cuda-wheelhouse $(CUDA_WHEELHOUSE) --neighbour-wheelhouse $(NEIGHBOUR_WHEELHOUSE) \
		--speed-engines $(BENCH_ENGINES)

## make bench-layers: only the layers section (the bytes neighbouring CUDA images share).
.PHONY: bench-layers wheelhouse-cuda-neighbour
bench-layers: $(STAMP) base wheelhouse-cuda wheelhouse-cuda-neighbour
	$(BIN)/python scripts/bench.py --base $(DEMO_BASE) --only layers \
		--cuda-wheelhouse $(CUDA_WHEELHOUSE) --neighbour-wheelhouse $(NEIGHBOUR_WHEELHOUSE)

## make bench-speed: only the speed section (imagekit against the expert Dockerfile).
.PHONY: bench-speed
bench-speed: $(STAMP) base wheelhouse wheelhouse-cuda
	$(BIN)/python scripts/bench.py --wheelhouse $(WHEELHOUSE) --base $(DEMO_BASE) \
		--cuda-wheelhouse $(CUDA_WHEELHOUSE) --only speed --speed-engines $(BENCH_ENGINES)

## make bench-cuda: only the CUDA section of the bench.
bench-cuda: $(STAMP) base wheelhouse-cuda
	$(BIN)/python scripts/bench.py --base $(DEMO_BASE) --cuda-wheelhouse $(CUDA_WHEELHOUSE) \
		--only cuda
