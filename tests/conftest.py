import atexit
import os
import shutil
import tempfile

# One temporary folder for the whole run, shared with xdist workers and every process the
# tests start (A/B workers, GPU lock files, pytest's own tmp_path), and removed at the end:
# the suite leaves nothing in the system's temporary folder.
_TEMP_ENV = "PYTEST_DISPATCH_TESTS_TMP"
if not os.path.isdir(os.environ.get(_TEMP_ENV, "")):
    os.environ[_TEMP_ENV] = tempfile.mkdtemp(prefix="pytest-dispatch-tests-")
    atexit.register(shutil.rmtree, os.environ[_TEMP_ENV], ignore_errors=True)
os.environ["TMPDIR"] = tempfile.tempdir = os.environ[_TEMP_ENV]

# Mesa warns on every device creation without a runtime dir.
if not os.path.isdir(os.environ.get("XDG_RUNTIME_DIR", "")):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="xdg-")

# The plugin loads these lazily. pytester's in-process runs drop the modules an inner run
# imported first, and numpy's extension cannot load twice in a process: import them here.
import numpy  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
import wgpu.backends.auto  # noqa: E402,F401

import pytest_dispatch.judgement.gate  # noqa: E402,F401
import pytest_dispatch.plugin.reporter  # noqa: E402,F401
import pytest  # noqa: E402


GPU_FIXTURES = {"gpu_adapter", "gpu_device", "gpu_info", "dispatch_meter"}


def pytest_collection_modifyitems(items):
    """Mark the tests that need an adapter, so `-m "not gpu and not slow"` runs the pure ones in seconds."""
    for item in items:
        if GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gpu)
