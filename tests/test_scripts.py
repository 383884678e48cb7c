"""The scripts of benchmarks/ and scripts/ import and answer --help; set-up waits for apt's lock."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*ROOT.glob("benchmarks/*"), *ROOT.glob("scripts/*")])

# Each Python script run as __main__ with --help in one child process (the imports shared): the
# paths of those that did not exit 0, with the error's last line.
_HELP_ALL = """
import contextlib, io, json, os, runpy, sys
failed = {}
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    sys.path.insert(0, os.path.dirname(path))  # as `python PATH` does: its helpers import
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
        failed[path] = "returned without exiting"
    except SystemExit as done:
        if done.code not in (0, None):
            failed[path] = f"exit {done.code}"
    except BaseException as error:
        failed[path] = f"{type(error).__name__}: {error}"
print(json.dumps(failed))
"""


def test_every_python_script_imports_and_answers_help():
    scripts = [str(path) for path in SCRIPTS if path.suffix == ".py"]
    assert len(scripts) >= 10
    before = _changed_files()
    done = subprocess.run([sys.executable, "-c", _HELP_ALL, *scripts], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}
    assert _changed_files() == before, "a script wrote into the source tree when asked for --help"


def _changed_files() -> str | None:
    """The source tree's changes as git sees them (None outside a git checkout)."""
    done = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.mark.parametrize("script", [path for path in SCRIPTS if path.suffix in (".sh", ".cjs")],
                         ids=lambda path: path.name)
def test_every_other_script_answers_help(script):
    runner = {".sh": "bash", ".cjs": "node"}[script.suffix]
    if shutil.which(runner) is None:
        pytest.skip(f"no {runner} on PATH")
    done = subprocess.run([runner, str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr


def test_setup_waits_a_bounded_time_for_the_package_managers_lock(tmp_path):
    """apt-get is handed DPkg::Lock::Timeout on every call, so a lock held by unattended upgrades
    on a fresh machine is waited for (apt's own bounded wait), not an immediate failure."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text('#!/bin/sh\necho "$*" >> "$APT_LOG"\n')
    (fake / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (fake / "no-venv-python").write_text("#!/bin/sh\nexit 1\n")  # so set-up goes to apt-get at once
    for tool in fake.iterdir():
        tool.chmod(0o755)
    log = tmp_path / "apt.log"
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "APT_LOG": str(log),
           "VENV": str(tmp_path / "venv"), "PYTHON": str(fake / "no-venv-python")}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode != 0  # the fake apt-get installs nothing
    calls = log.read_text().splitlines()
    assert [call.split()[2] for call in calls] == ["update", "install"]
    assert all(call.startswith("-o DPkg::Lock::Timeout=") and int(call.split()[1].split("=")[1]) > 0
               for call in calls), calls
