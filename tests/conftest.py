import atexit
import os
import shutil
import sys
import tempfile

# One temporary folder for the whole run, shared with xdist workers and every process the
# tests start (A/B workers, GPU lock files, pytest's own tmp_path), and removed at the end:
# the suite leaves nothing in the system's temporary folder.
_TEMP_ENV = "PYTEST_DISPATCH_TESTS_TMP"
if not os.path.isdir(os.environ.get(_TEMP_ENV, "")):
    os.environ[_TEMP_ENV] = tempfile.mkdtemp(prefix="pytest-dispatch-tests-")
    atexit.register(shutil.rmtree, os.environ[_TEMP_ENV], ignore_errors=True)
os.environ["TMPDIR"] = tempfile.tempdir = os.environ[_TEMP_ENV]

# anyio's pytest plugin comes with an optional extra's dependencies (tokenizers, huggingface_hub,
# httpx) and no test uses it, yet each of the several hundred pytest sessions the suite starts
# (xdist's and A/B workers, pytester's and counted sessions) would import it: about 0.15 CPU s a
# session, a second under callgrind.  They inherit this; pytester clears it, the fixture below
# puts it back.  The docs' blocks run in the environment a reader has, without it.
NO_ANYIO = "-p no:anyio"
if NO_ANYIO not in os.environ.get("PYTEST_ADDOPTS", ""):
    os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {NO_ANYIO}".strip()

# Bytecode caches on, whatever the environment says: with PYTHONDONTWRITEBYTECODE set, each of
# those Python processes would redo pytest's assertion rewrite of the plugins it loads
# (pytest-benchmark's, xdist's; about 0.05 CPU s a session).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Mesa warns on every device creation without a runtime dir.
if not os.path.isdir(os.environ.get("XDG_RUNTIME_DIR", "")):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="xdg-")

# The plugin loads these lazily. pytester's in-process runs drop the modules an inner run
# imported first, and numpy's extension cannot load twice in a process: import them here.
import numpy  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
import wgpu.backends.auto  # noqa: E402,F401

try:  # and Dawn's backend, which refuses to be imported twice in a process
    import wgpudawn.backends.dawn  # noqa: F401
except ImportError:
    pass

import pytest_dispatch.judgement.gate  # noqa: E402,F401
import pytest_dispatch.plugin.reporter  # noqa: E402,F401
import pytest  # noqa: E402


GPU_FIXTURES = {"gpu_adapter", "gpu_device", "gpu_info", "dispatch_meter"}


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester's, its sessions without anyio's plugin as every other session here."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_ANYIO)
    return pytester


@pytest.fixture
def quick_probe(monkeypatch):
    """For a test's in-process page session: the adapter probe bounded at 0.5 s (a page with an
    adapter, or none, answered it in 5-60 ms at load 7), and a page that does not answer ended 0.5 s
    past a time-out (not 2 s): every question such a session does not mean to time out is answered
    in milliseconds, so the grace only delays ending a blocked page."""
    import pytest_dispatch.plugin.page as page
    import pytest_dispatch.plugin.realms as realms

    monkeypatch.setattr(page, "PROBE_TIMEOUT", 0.5)
    monkeypatch.setattr(realms, "BLOCKED_GRACE", 0.5)


# The modules whose tests take tens of seconds to minutes without a GPU (valgrind sessions,
# A/B jobs, subprocess sessions, simulations), longest first.  They run first, so that under
# `-n 2` the two workers end together instead of one of them starting a long test at the end;
# Firefox's, which mostly waits (its starts, its polls), first of all, beside the busiest ones.
LONG_FIRST = ("test_firefox_page.py", "test_counted.py", "test_ab.py", "test_ci_recipe.py", "test_docs.py",
              "test_ab_hang.py", "test_many_sources.py", "test_page.py", "test_robustness.py", "test_engines.py",
              "test_contention.py", "test_browser.py", "test_sessions.py", "test_report.py", "test_gate.py",
              "test_stats.py", "test_startup.py", "test_paired.py", "test_two_gpus.py")


def pytest_configure(config):
    """Under pytest-xdist, hand tests out one at a time (--maxschedchunk 1, unless given): by
    default each worker is sent a quarter of the suite at once, which puts the long tests that
    run first on one worker in consecutive runs."""
    if getattr(config.option, "maxschedchunk", "absent") is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(items):
    """Mark the tests that need an adapter, so `-m "not gpu and not slow"` runs the pure ones in
    seconds; put the long modules first (stable: a module's own order is kept)."""
    for item in items:
        if GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gpu)
    rank = {name: place for place, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))
