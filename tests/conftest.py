import os
import tempfile

# Mesa warns on every device creation without a runtime dir.
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="xdg-"))
