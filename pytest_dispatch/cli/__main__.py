"""``python -m pytest_dispatch.cli``: the ``pytest-dispatch`` command."""

import sys

from pytest_dispatch.cli import main

sys.exit(main())
