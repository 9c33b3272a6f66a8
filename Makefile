# Every target is self-sufficient on a fresh machine: it builds .venv first.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
# CPU wheel by default; a GPU user with their own torch in the venv keeps it
# (we install only when `import torch` fails), or sets TORCH_SPEC="torch".
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test bench bench-quick lint venv torch clean

venv: $(VENV)/.installed

# EXTRAS: the optional dependencies to install (`make venv EXTRAS=dev,ray` adds Ray's job client).
EXTRAS ?= dev

# Editable, but through a link: setuptools' editable finder (a .pth) imports pathlib, re and urllib
# in every Python process of the venv, ~13 ms each; `make test` starts thousands of them (the runs
# it launches included). The link `autoresearch_skills -> tools` sees new modules as the finder did.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	    ln -sfn "$(CURDIR)/tools" "$$site/autoresearch_skills" && \
	    rm -f "$$site"/__editable__*autoresearch_skills*
	touch $@

torch: venv
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"

demo: venv torch
	$(PY) -m autoresearch_skills.demo

# The tests mostly wait on real processes (git, tmux, Slurm, the runs they launch), so three workers
# per core keep the cores busy: each worker starts with its share of the long tests (tests/conftest.py
# orders them for worksteal's slices), most of which sleep on a real clock (Slurm's minute-granular
# limits, a demo's fixed training budgets); with two per core the cores idled for the first minute.
# worksteal hands a worker that is done the queue of one still busy, so short tests are what is left
# at the end. Each worker forks `ars` from a warm interpreter (tests/warm_ars.py). --durations=15:
# the slowest 15.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 2) * 3 )))

test: venv torch
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist worksteal -p no:hydra_pytest --durations=15

# Every speed goal in one table (about 3 minutes; the per-topic scripts in bench/ give the detail).
bench: venv
	$(PY) bench/table.py

# Under a minute, ratios to floors measured in the same run: run it before every change to tools/.
bench-quick: venv
	$(PY) bench/quick.py

lint: venv
	$(VENV)/bin/ruff check tools tests bench
	$(VENV)/bin/ruff format --check tools tests bench

clean:
	rm -rf $(VENV) build *.egg-info
