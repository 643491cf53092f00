# One entry point for people and CI. `make train` and `make test` each set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup train test lint docs bench clean smoke-wheel

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade uv
	# Bytecode now, once: with PYTHONDONTWRITEBYTECODE set (as on this project's machines) every
	# process would otherwise compile jax, flax, ray... from source at each start (≈ 4 s of CPU for
	# `dmpo train`, paid again by each subprocess test and each Ray worker).
	$(BIN)/uv pip sync --quiet --compile-bytecode --python $(BIN)/python requirements.lock
	# The checkout was installed as `dmpo` before its distribution became `dmpo-jax`: remove that one.
	$(BIN)/uv pip uninstall --quiet --python $(BIN)/python dmpo 2>/dev/null || true
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# The main job: train DMPO on the default embedded task (see README).
train: $(STAMP)
	$(BIN)/dmpo train $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/lint-imports --no-cache
	@# A merge's conflict markers left in a tracked file.
	@! git grep -nE '^(<<<<<<<|>>>>>>>) ' -- . || (echo "conflict markers left by a merge" && false)

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link, a missing page or a
# docstring reference mkdocstrings cannot resolve. Output in site/ (ignored by git). Not --quiet: with
# it, mkdocs 1.6 drops the warnings before --strict counts them, and a broken link passes.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Two pytest-xdist workers; the tests that start Ray form two groups, each run one test after
# another on one worker (tests/conftest.py), so that at most two clusters share the two cores.
test: lint docs
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

# Build the wheel and install it as a user would, from its ranges alone (no lock, no Ray), at the
# newest and at the lowest versions they allow; train 2,000 steps in each, then add the
# [distributed] extra and train 500 steps with --actors 1 (.ci/wheel-smoke).
# The wheel is built once; the two resolutions then run side by side (each line of theirs says which):
# each waits on installs and a Ray start as much as on the CPU. Fails if either fails.
smoke-wheel: $(STAMP)
	rm -rf build/smoke-wheel && $(BIN)/uv build --quiet --wheel --out-dir build/smoke-wheel .
	WHEEL=$$(ls build/smoke-wheel/dmpo_jax-*.whl); \
	UV=$(BIN)/uv PYTHON=$(PYTHON) WHEEL=$$WHEEL .ci/wheel-smoke highest & highest=$$!; \
	UV=$(BIN)/uv PYTHON=$(PYTHON) WHEEL=$$WHEEL .ci/wheel-smoke lowest-direct; lowest=$$?; \
	wait $$highest; test $$? -eq 0 -a $$lowest -eq 0

clean:
	rm -rf $(VENV)
