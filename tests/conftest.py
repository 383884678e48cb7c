import os
import tempfile

# Mesa warns on every device creation without a runtime dir.
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))

# The plugin loads these lazily. pytester's in-process runs drop the modules an inner run
# imported first, and numpy's extension cannot load twice in a process: import them here.
import numpy  # noqa: E402,F401
import scipy.stats  # noqa: E402,F401
import wgpu.backends.auto  # noqa: E402,F401

import pytest_dispatch.judgement.gate  # noqa: E402,F401
import pytest_dispatch.plugin.reporter  # noqa: E402,F401
