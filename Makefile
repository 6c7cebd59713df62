# The two commands of the README (setup, test), the checks and the fast inner loop.
.PHONY: setup example test test-fast check bench
PY ?= .venv/bin/python
CARGO ?= $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)

setup:
	scripts/setup.sh
example:
	scripts/example.sh
# the whole suite: Slurm, munge, PRRTE and Chromium installed and started (minutes to hours)
test:
	scripts/test.sh
# everything that needs no Slurm, PRRTE/MPI or browser (tests marked so, tests/batch, rp,
# parsl) and is not marked slow, under 3 minutes on 2 cores; the agent and client run for real
test-fast:
	PILOTFISH_SUBSTRATES=skip $(PY) -m pytest -q -p no:cacheprovider -x \
	    -m "not slurm and not prrte and not mpi and not browser and not slow" \
	    --ignore=tests/batch --ignore=tests/rp --ignore=tests/parsl $(ARGS)
# ruff lint + format check, mypy, cargo fmt/clippy/test (scripts/check.sh)
check:
	scripts/check.sh
