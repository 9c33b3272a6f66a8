"""A built wheel carries the skills, references and templates: `ars init` and
`ars skills install` work after a plain `pip install`, not only from a checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What the build reads (pyproject.toml, setup.py's bundled folders, MANIFEST.in's includes).
SOURCE_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
SOURCE_DIRS = ("tools", "skills", "references", "templates")


def private_source_tree(work: Path) -> Path:
    """A copy of the sources: setuptools writes build/ and *.egg-info beside them, and a build in
    the checkout itself collides with parallel test workers and a developer's own build."""
    source = work / "src"
    source.mkdir()
    for name in SOURCE_FILES:
        shutil.copy2(ROOT / name, source / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ars-*")
    for name in SOURCE_DIRS:
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    return source


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = private_source_tree(work)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"), str(source)],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    if build.returncode != 0:
        pytest.fail(build.stderr[-2000:])
    (wheel,) = (work / "dist").glob("autoresearch_skills-*.whl")
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    return target


def run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """Python with the wheel's files first and none of the checkout's: without site (-S), so that no
    editable install of the checkout answers for a module the wheel lacks; the dependencies come
    from this interpreter's site-packages, behind the wheel."""
    path = os.pathsep.join((str(site), sysconfig.get_paths()["purelib"]))
    env = {**os.environ, "PYTHONPATH": path, "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_wheel_imports_from_its_own_files_with_bundled_data(installed: Path, tmp_path: Path):
    code = "import autoresearch_skills.resources as r; print(r.__file__); print(r.resource_dir('templates'))"
    out = run(installed, tmp_path, "-c", code)
    assert out.returncode == 0, out.stderr
    module_file, templates = out.stdout.split()
    assert module_file.startswith(str(installed))
    assert templates == str(installed / "autoresearch_skills" / "_bundled" / "templates")
    for sub in (
        "launch/local.py",
        "sources/logs.py",
        "_bundled/skills/auto-research/SKILL.md",
        "_bundled/references/stop-rules.md",
    ):
        assert (installed / "autoresearch_skills" / sub).exists(), sub


def test_every_module_of_the_checkout_is_in_the_wheel_and_imports_from_it(installed: Path, tmp_path: Path):
    """A subpackage left out of pyproject.toml's `packages` imports in a checkout and fails after a
    plain `pip install`."""
    ours = sorted(
        ".".join(("autoresearch_skills", *path.relative_to(ROOT / "tools").with_suffix("").parts))
        for path in (ROOT / "tools").rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    )
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint('ok')"
    out = run(installed, tmp_path, "-c", code, *ours)
    assert (out.returncode, out.stdout) == (0, "ok\n"), out.stderr[-2000:]


def test_init_and_skills_install_work_from_the_wheel(installed: Path, tmp_path: Path):
    created = run(
        installed, tmp_path, "-m", "autoresearch_skills.cli", "init", "tiny-lm", str(tmp_path / "lm")
    )
    assert created.returncode == 0, created.stderr
    assert (tmp_path / "lm" / "train.py").exists() and (tmp_path / "lm" / "prepare.py").exists()
    skills = run(
        installed, tmp_path, "-m", "autoresearch_skills.cli", "skills", "install", "--agent", "claude"
    )
    assert skills.returncode == 0, skills.stderr
    assert (tmp_path / ".claude" / "skills" / "auto-research" / "SKILL.md").exists()
