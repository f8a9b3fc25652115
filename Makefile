# The two commands of the README, and the pieces they are made of.
#   make run   - the main job on its built-in default (a real RL run on the default model)
#   make test  - the habits (ruff, ruff format, mypy), then every test tier (unit with the
#                packages' doctests, docker, engine, e2e)
# Both run the idempotent set-up first; a second set-up takes seconds.

PY := .venv/bin/python

.PHONY: setup run test test-unit test-gpu lint typecheck
setup:
	scripts/setup.sh

run: setup
	.venv/bin/rollgym run

# Two pytest-xdist workers, a test file each at a time (--dist loadfile: a module's
# servers and fixtures stay in one process): the serial suite left ~40% of the 2 cores
# idle (waits on containers, servers, polls) and took 36-40 min; two workers took 25.5.
# More would crowd a 2-core machine's memory and cores with engines and trainers.
test: setup lint typecheck
	$(PY) -m pytest -n 2 --dist loadfile

test-unit:
	$(PY) -m pytest -m unit

# On a GPU host: the trainer's unit tests, which then train on CUDA (and run the tensor
# code's tests on both devices). make test covers the CPU.
test-gpu:
	$(PY) -c "import sys, torch; torch.cuda.is_available() or sys.exit('no CUDA device here')"
	$(PY) -m pytest -m unit tests/unit/test_trainer_*.py

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

typecheck:
	$(PY) scripts/typecheck.py
