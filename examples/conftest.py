import atexit
import os
import shutil
import tempfile

# Mesa warns on every device creation without a runtime dir: a private one where none is set,
# removed at exit (os.environ.setdefault made one in the temporary folder every session, and kept it).
if not os.path.isdir(os.environ.get("XDG_RUNTIME_DIR", "")):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="xdg-")
    atexit.register(shutil.rmtree, os.environ["XDG_RUNTIME_DIR"], ignore_errors=True)
