"""The bottom of the package: facts every layer may import, importing nothing of the package."""

from pathlib import Path

__version__ = "0.1.0"  # the one place of the version: pyproject.toml and the root package read it
PACKAGE_DIR = Path(__file__).resolve().parent  # code under it is the plugin's own, not the user's
