# The README's two commands: `make run` (the daemon) and `make test` (the whole test suite); `make check`
# is the developers' fast loop (lint, types, unit tests; no system packages, services or PyTorch cases).
# Both create .venv and install what they need; nothing is assumed to be on the machine already.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
# PyTorch for the training patches and their tests (README "PyTorch: which build, what it downloads"). TORCH_SPEC
# is what pip installs; the build comes from, first match:
# - TORCH_INDEX_URL=URL: that index beside PyPI (https://download.pytorch.org/whl/cpu: the CPU build);
# - a machine with an amdgpu GPU (scripts/torch-build.sh reads $(TORCH_SYSFS_ROOT)): PyTorch's ROCm build,
#   from TORCH_ROCM_INDEX_URL alone (--index-url: a TORCH_SPEC that index lacks fails, rather than bringing
#   PyPI's CUDA build); TORCH_BUILD=default skips it;
# - otherwise what pip finds: on CI and the developers' machines 2.13.0's CPU wheel, from pip's find-links;
#   elsewhere PyPI's torch, a CUDA build of several GB.
# Changing any of them after .venv exists: make clean first.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
TORCH_ROCM ?= rocm7.1
TORCH_ROCM_INDEX_URL ?= https://download.pytorch.org/whl/$(TORCH_ROCM)
TORCH_SYSFS_ROOT ?= /sys
ifeq ($(origin TORCH_BUILD),undefined)
TORCH_BUILD := $(if $(TORCH_INDEX_URL),index,$(shell sh scripts/torch-build.sh '$(TORCH_SYSFS_ROOT)'))
endif

.PHONY: run daemon test check mutation venv system-deps clean install uninstall screenshot

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
ifeq ($(TORCH_BUILD),rocm)
	@echo "An amdgpu GPU is here: installing PyTorch's ROCm build ($(TORCH_SPEC), several GB) from $(TORCH_ROCM_INDEX_URL)."
	@echo "(make clean, then TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for the CPU build of about 200 MB.)"
	$(PY) -m pip install -q '$(TORCH_SPEC)' --index-url '$(TORCH_ROCM_INDEX_URL)'
endif
	$(PY) -m pip install -q -e '.[test,train]' '$(TORCH_SPEC)' $(if $(TORCH_INDEX_URL),--extra-index-url '$(TORCH_INDEX_URL)')
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests run for real (promtool/prometheus, node_exporter, alertmanager/amtool,
# systemd-analyze); none of their services is started. Installing them needs root (or sudo); without
# either the script names the packages to install and fails.
system-deps:
	@scripts/install-system-deps.sh

# The demo: the daemon on a simulated GPU with a supervised trainer and a live status view
# (demo/run_demo.py, config/demo.toml, docs/simulator.md). Ctrl-C stops it.
run: $(STAMP)
	$(PY) demo/run_demo.py $(ARGS)

# The daemon on this machine's real GPUs (/sys), in the foreground.
daemon: $(STAMP)
	$(VENV)/bin/gpuwatch run $(ARGS)

test: $(STAMP) system-deps
	scripts/run-tests.sh

# ruff, mypy --strict, and every test outside tests/e2e and tests/train on two workers (under a minute).
check: $(STAMP)
	scripts/run-tests.sh --check

# The live page's pictures (docs/page.md): docs/page.png taken by its browser test in headless Chromium against a
# simulated daemon, which also prints the page's first paint; docs/page-hot.png and page-cool.png of two cards.
screenshot: $(STAMP) system-deps
	GPUWATCH_UPDATE_SCREENSHOT=1 $(PY) -m pytest -q -s -p no:randomly \
		tests/e2e/test_page.py::test_the_page_shows_status_live_and_a_reset_within_two_ticks \
		tests/e2e/test_page_levels.py::test_a_hot_card_does_not_look_like_a_cool_one

# Mutation testing of the pure modules (mutmut, from the test extra; scripts/mutation.py, docs/testing.md): each
# module in its own copy under .mutation/ with only its own tests, one test process at a time (the machine may be
# shared; MUTATION_JOBS=N for more). MODULES="curve governor" runs just those. Fails on a survivor not listed
# as equivalent.
MODULES ?=
mutation: $(STAMP)
	$(PY) scripts/mutation.py $(MODULES)

# System install as a systemd service (docs/systemd.md). Honours PREFIX, SYSCONFDIR, UNITDIR, DESTDIR (with
# WITH_VENV=0: a venv cannot be staged), SYSTEMCTL given on the command line (make install PREFIX=/opt/gpuwatch).
# Needs root for the defaults.
install:
	scripts/install.sh

uninstall:
	scripts/uninstall.sh

clean:
	rm -rf $(VENV) .pytest_cache
