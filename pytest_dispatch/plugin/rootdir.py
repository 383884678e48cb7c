"""Test ids that do not depend on where the storage (or a results file) lives.

pytest chooses its rootdir, which every node id is relative to, before it loads plugins: an
option of this plugin written with a space (``--dispatch-storage /abs/store``) then passes its
value for a test path, and an existing folder moves the rootdir to the common ancestor, so
every measurement key changes and a gate finds no baseline.  Once the plugin's options are
known, the rootdir is chosen again from the real test paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest

from pytest_dispatch import options


def _spaced_values(args: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) of each option of this plugin given as two words."""
    flags = {option.flag for option in options.ALL_OPTIONS if option.type != "bool"}
    return [(arg, value) for arg, value in zip(args, args[1:]) if arg in flags and not value.startswith("-")]


def _setup_without_them(config: pytest.Config) -> Any:
    """pytest's (rootpath, inipath, ...) of the command line with this plugin's options known."""
    from _pytest.config.findpaths import determine_setup

    known = config.known_args_namespace
    return determine_setup(inifile=known.inifilename, override_ini=known.override_ini, args=known.file_or_dir,
                           rootdir_cmd_arg=known.rootdir or None, invocation_dir=config.invocation_params.dir)


def settle(config: pytest.Config, args: Sequence[str]) -> None:
    """Choose the rootdir again where a value of this plugin's options moved it; where it
    also hid the project's ini file (whose addopts are then lost), a usage error that says
    to write the option with '='."""
    spaced = [(flag, value) for flag, value in _spaced_values(list(args)) if Path(value).exists()]
    if not spaced or not hasattr(config, "_rootpath"):
        return
    try:
        rootpath, inipath, *_ = _setup_without_them(config)
    except (ImportError, TypeError):  # another pytest's internals: keep its choice
        return
    if rootpath == config.rootpath:
        return
    if inipath != config.inipath:
        flag, value = spaced[0]
        raise pytest.UsageError(
            f"{flag} {value}: pytest took the value for a test path and chose {config.rootpath} as rootdir "
            f"(not {rootpath}), so test ids would depend on it; write {flag}={value}")
    known = config.known_args_namespace
    if known.confcutdir == str(config.rootpath):
        known.confcutdir = str(rootpath)
    config._rootpath = rootpath
