"""The install path: one version, a setup that does nothing when nothing changed."""

import importlib.metadata
import os
import subprocess
import tomllib
from pathlib import Path

import pytest_dispatch

ROOT = Path(__file__).resolve().parent.parent
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "{log}"
exit 0
"""


def test_the_version_has_one_source():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("pytest-dispatch") == pytest_dispatch.__version__


def test_the_license_is_an_spdx_expression_with_its_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and all((ROOT / name).is_file() for name in project["license-files"])


def test_setup_installs_once_until_pyproject_or_the_script_changes(tmp_path):
    log = tmp_path / "python.log"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "python"
    fake.write_text(FAKE_PYTHON.format(log=log))
    fake.chmod(0o755)
    env = {**os.environ, "VENV": str(venv)}

    def setup() -> str:
        done = subprocess.run([str(ROOT / "scripts" / "setup.sh")], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    setup()
    assert "pip install -q -e .[" in log.read_text()
    calls = log.read_text()
    assert "up to date" in setup()
    assert log.read_text() == calls  # not even Python was started
    (venv / ".pytest-dispatch-setup").write_text("a stamp of another pyproject.toml\n")
    setup()
    assert log.read_text().count("pip install -q -e .[") == 2
