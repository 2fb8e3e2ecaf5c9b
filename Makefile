# The README's two commands: `make run` (the daemon) and `make test` (the whole test suite).
# Both create .venv and install what they need; nothing is assumed to be on the machine already.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=
# The training-patch tests run on PyTorch's CPU build; this machine kind ships 2.13.0's wheel locally
# (an unpinned torch would pull several GB of CUDA packages). Override for another machine.
TORCH_SPEC ?= torch==2.13.0

.PHONY: run daemon test venv system-deps clean install uninstall

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,train]' '$(TORCH_SPEC)'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests run for real (promtool/prometheus, node_exporter, alertmanager/amtool,
# systemd-analyze); none of their services is started.
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

# System install as a systemd service (docs/systemd.md). Honours PREFIX, SYSCONFDIR, UNITDIR, DESTDIR,
# SYSTEMCTL given on the command line (make install PREFIX=/opt/gpuwatch). Needs root for the defaults.
install:
	scripts/install.sh

uninstall:
	scripts/uninstall.sh

clean:
	rm -rf $(VENV) .pytest_cache
