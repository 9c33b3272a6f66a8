# Every target is self-sufficient on a fresh machine: it builds .venv first.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
# CPU wheel by default; a GPU user with their own torch in the venv keeps it
# (we install only when `import torch` fails), or sets TORCH_SPEC="torch".
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test bench lint venv torch clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

torch: venv
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"

demo: venv torch
	$(PY) -m autoresearch_skills.demo

test: venv torch
	$(VENV)/bin/pytest -q -n 4

bench: venv
	@for script in bench/*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

lint: venv
	$(VENV)/bin/ruff check tools tests bench
	$(VENV)/bin/ruff format --check tools tests bench

clean:
	rm -rf $(VENV) build *.egg-info
