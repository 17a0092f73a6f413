# Sparring — two commands on a fresh Debian machine:
#   make demo   set everything up, then run the main job end to end
#   make test   set everything up, then run the whole test suite
# Both are idempotent: a second run only re-checks the stamps.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
EXTRAS ?= train,dev,parquet,trl,verifiers,openenv,gym,spreadsheet,report,ray,docs,gguf
TEST_USER := sparring-test
# A local wheel directory (this workplace keeps the CPU build of torch there); harmless elsewhere.
WHEELS := $(wildcard /opt/wheels)
# There, the CPU build of torch is pinned too (constraints/local-cpu.txt), so set-up never pulls CUDA
# wheels; elsewhere [train] takes any torch in its range (a CUDA build already installed stays).
CONSTRAINTS := $(if $(WHEELS),constraints/local-cpu.txt,)
PIP_FLAGS := $(if $(WHEELS),--find-links $(WHEELS),) $(if $(CONSTRAINTS),-c $(CONSTRAINTS),)
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(CONSTRAINTS) | sha1sum | cut -c1-12)-$(EXTRAS)

.PHONY: setup system venv demo demo-quick test test-fast lint typecheck bench contract clean docs

setup: system venv

# bubblewrap runs the sandboxes; a C compiler builds their exec server (without one, a slower Python
# server is used). LibreOffice recalculates the spreadsheet family's workbooks in the judge; chromium
# opens the report pages headless in their tests.
SYSTEM_PKGS := bubblewrap:bwrap gcc:cc libc6-dev:/usr/include/stdio.h libreoffice-calc-nogui:soffice chromium:chromium

system:
	@missing=""; for pair in $(SYSTEM_PKGS); do pkg=$${pair%%:*}; probe=$${pair#*:}; \
	  case "$$probe" in /*) [ -e "$$probe" ] || missing="$$missing $$pkg";; \
	    *) command -v "$$probe" >/dev/null 2>&1 || missing="$$missing $$pkg";; esac; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing$$missing (apt)"; \
	  (apt-get install -y -qq $$missing >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq $$missing)); \
	elif ! command -v bwrap >/dev/null 2>&1; then \
	  echo "error: bubblewrap (bwrap) is missing; install it as root: apt-get install bubblewrap" >&2; exit 1; \
	else echo "note:$$missing missing (not root): sandboxes use the slower Python exec server" >&2; \
	fi
	@# An unprivileged user: `make test` re-runs the sandbox, judge and rollout security tests as it
	@# (tests/unprivileged), so the fallbacks a cluster user gets are exercised on every run.
	@if [ "$$(id -u)" = "0" ] && ! id $(TEST_USER) >/dev/null 2>&1; then \
	  useradd --system --no-create-home --shell /usr/sbin/nologin $(TEST_USER) \
	  || echo "warning: could not create user $(TEST_USER); the unprivileged tests will fail" >&2; fi
	@# OCI backend (podman + runc; busybox-static builds its local image). Optional: without it only
	@# the OCI tests fail, each with a message saying what to install.
	@if command -v dpkg-query >/dev/null 2>&1; then \
	  missing=""; for p in podman runc catatonit busybox-static; do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
	  if [ -z "$$missing" ]; then :; \
	  elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (apt)"; \
	    (apt-get install -y -qq $$missing >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq $$missing)) \
	    || echo "warning: could not install$$missing; the OCI backend tests will fail until it is" >&2; \
	  else echo "warning:$$missing missing (as root: apt-get install$$missing); the OCI backend tests will fail" >&2; fi; \
	elif ! command -v podman >/dev/null 2>&1; then \
	  echo "warning: podman is missing; the OCI backend tests will fail" >&2; \
	fi
	@# Container images (issue 34): skopeo and docker-registry serve test images on loopback, mmdebstrap
	@# builds them, buildah runs `sparring image build`. Optional: without them only the image tests fail.
	@if command -v dpkg-query >/dev/null 2>&1; then \
	  missing=""; for p in mmdebstrap docker-registry skopeo buildah; do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; done; \
	  if [ -z "$$missing" ]; then :; \
	  elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing (apt)"; \
	    (apt-get install -y -qq $$missing >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq $$missing)) \
	    || echo "warning: could not install$$missing; the image tests will fail until it is" >&2; \
	  else echo "warning:$$missing missing (as root: apt-get install$$missing); the image tests will fail" >&2; fi; \
	fi

venv: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] <= (3, 13), "Python 3.11 to 3.13 is needed, found " + sys.version.split()[0]'
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check $(PIP_FLAGS) -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: setup
	$(VENV)/bin/sparring demo

demo-quick: setup
	$(VENV)/bin/sparring demo --quick

# The suite in parallel: TEST_JOBS workers (most tests wait on subprocesses and sandboxes, so more
# workers than cores), each file on one worker, Ray and SmolLM2 files together (tests/xdist_units.py).
# TEST_JOBS=0 runs it in this one process.
TEST_JOBS ?= 3
XDIST := $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadgroup)
test: setup lint typecheck
	$(VENV)/bin/pytest -q --durations=30 $(XDIST) --unit-durations-out=.sparring/unit-durations.json

# The documentation site (mkdocs.yml) into site/: open site/index.html.
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow" $(XDIST)

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: setup
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/python benchmarks/sandbox_bench.py

contract: setup
	$(PYTHON) ../shared/tools/contract_check.py

clean:
	rm -rf $(VENV) .sparring .pytest_cache
