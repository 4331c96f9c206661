# xidpipe: the two commands for a fresh machine are `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help install demo test lint services system-packages kafka-jars testcluster image bench clean

help:
	@echo "make demo   run xidpipe on the bundled sample cluster (embedded defaults)"
	@echo "make test   lint, type-check, architecture contracts and every test (what CI runs)"
	@echo "make image  build the container image xidpipe:dev with podman (deploy/image/build.sh)"
	@echo "make bench  run the benchmarks in benchmarks/ (prints JSON)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(STAMP)

demo: install kafka-jars
	$(BIN)/xidpipe demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Everything the tests need that is not a Python package: the Kafka jars from Maven Central,
# Debian packages (PostgreSQL server; systemd-journal-remote and journalctl for real journal files;
# gcc to build the fake libnvidia-ml.so.1; chromium, headless, for the web page tests; podman, runc
# and mmdebstrap for the container image), and the test components built from Go modules in
# parallel (kube-apiserver, kube-scheduler, kube-controller-manager, etcd, KWOK, Alertmanager,
# promtool, helm: deploy/testcluster/build.sh, docs/testcluster.md).
services: install system-packages kafka-jars testcluster

system-packages:
	@missing=""; \
	  { command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  test -x /lib/systemd/systemd-journal-remote || missing="$$missing systemd-journal-remote"; \
	  command -v journalctl >/dev/null 2>&1 || missing="$$missing systemd"; \
	  { command -v gcc && test -e /usr/include/stdio.h; } >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  for tool in podman runc mmdebstrap; do command -v $$tool >/dev/null 2>&1 || missing="$$missing $$tool"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi

kafka-jars: install
	$(BIN)/xidpipe dev kafka fetch

testcluster:
	@if [ -x deploy/testcluster/build.sh ]; then deploy/testcluster/build.sh; fi

# The image xidpipe:dev, built with podman from a locally made Debian base (no registry needed);
# skipped when the image of the current sources exists. deploy/image/build.sh says how.
image: system-packages
	CONTAINERS_CONF=$${CONTAINERS_CONF:-$(CURDIR)/deploy/image/containers.conf} deploy/image/build.sh

test: lint services image
	$(BIN)/python -m pytest

# Each benchmark prints one JSON object; those that need Kafka or the control plane start their own.
bench: services
	@for b in benchmarks/*_bench.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts var
