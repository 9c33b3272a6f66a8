"""Build hook: ship skills/, references/ and templates/ inside the wheel, so that
`ars skills install` and `ars init` work after installing the wheel (`pip install autoresearch_skills-*.whl`)
(resources.py looks in autoresearch_skills/_bundled/ first, then beside tools/ in a checkout)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("skills", "references", "templates")


class BuildWithBundledData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout directly
        target = Path(self.build_lib) / "autoresearch_skills" / "_bundled"
        for name in BUNDLED:
            source = Path(__file__).parent / name
            if source.is_dir():
                shutil.copytree(source, target / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ars-*"))


setup(cmdclass={"build_py": BuildWithBundledData})
