# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Quiet unless `make run V=1` (any V): pip's output, setuptools' build warnings (its notice about editable installs
# on every install), and Spark's logging with the JVM's start-up notes (`rehearse -v`).
QUIET      := $(if $(V),,-q)
BUILD_ENV  := $(if $(V),,PYTHONWARNINGS=ignore)
VERBOSE    := $(if $(V),-v,)

.PHONY: run test test-fast check install install-test proto check-java check-prometheus clean docs

$(VENV)/.created:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "txnadmin needs Python 3.11 or newer (found " + sys.version.split()[0] + ")")'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(QUIET) --upgrade pip
	@touch $@

$(VENV)/.installed: $(VENV)/.created pyproject.toml
	$(BUILD_ENV) $(PIP) install $(QUIET) --config-settings editable_mode=compat -e .
	@touch $@

$(VENV)/.installed-test: $(VENV)/.created pyproject.toml
	$(BUILD_ENV) $(PIP) install $(QUIET) --config-settings editable_mode=compat -e '.[test]'
	@touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

check-java:
	@command -v java >/dev/null 2>&1 || [ -x "$$JAVA_HOME/bin/java" ] || { \
	  echo "error: Java 17 is needed for Spark (txnadmin scan): install a JDK 17 and put java on PATH or set JAVA_HOME" >&2; exit 1; }

# The alert-rule and dashboard tests run Debian's promtool and prometheus: installed here when missing and run as root
# (CI's clean machine); otherwise those tests fail and say how to install them.
check-prometheus:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus package (promtool, prometheus) for the alert and dashboard tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus >/dev/null; }; \
	  else \
	    echo "warning: promtool/prometheus missing; as root: apt-get install -y prometheus (their tests will fail)" >&2; \
	  fi; }

# The main job: a guided downgrade rehearsal on the embedded engine (see docs/).
# `--discard` removes the rehearsal's files when it ends, whatever the verdict, and its verdict line says so; TMPDIR
# points into a directory of make's own so that a killed run (and Spark's scratch files) leaves nothing behind either.
# The next steps' comments line up however long the VENV path is.
run: $(VENV)/.installed check-java
	@tmp=$$(mktemp -d); TMPDIR="$$tmp" $(VENV)/bin/txnadmin rehearse $(VERBOSE) --discard; rc=$$?; rm -rf "$$tmp"; \
	echo ""; \
	echo "next steps:"; \
	act=". $(VENV)/bin/activate"; w=$${#act}; [ $$w -ge 21 ] || w=21; \
	printf "  %-$${w}s  # %s\n" "$$act" "puts txnadmin on PATH (or run $(VENV)/bin/txnadmin)" \
	  "txnadmin -h" "the commands, most used first" \
	  "README.md, Quick tour" "an engine of your own, then pulsar-admin's commands on it"; \
	exit $$rc

# Lint and type checks first: a clean clone (.ci/run) fails on a finding as it fails on a test. Two workers: most of
# the suite's time is spent waiting on servers, polls and timeouts, so two overlap well on two cores; each file stays
# whole on one worker and every Spark test shares one worker's session (tests/conftest.py). The slowest tests are
# listed at the end, so a run that creeps toward the 15-minute budget shows where the time went.
test: $(VENV)/.installed-test check-java check-prometheus check
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=15 --durations-min=5

# The inner loop while editing: no lint, no Spark, no slow rehearsals (markers in pyproject.toml), one worker per core
# with each file kept on one worker (some files order their tests). `make test` stays the gate and runs everything.
test-fast: $(VENV)/.installed-test check-prometheus
	$(PY) -m pytest -q -m "not spark and not slow" -n auto --dist loadfile

# Lint and type checks (settings in pyproject.toml; ruff and mypy are pinned in the test extra).
check: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Regenerate txnadmin/codec/pb from proto/ (tests fail when they drift apart).
proto: $(VENV)/.installed-test
	$(PY) proto/generate.py

docs: $(VENV)/.installed
	$(PY) -m txnadmin.cli.docgen > docs/cli-reference.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
