"""What the session's gate is made of: counted mode's switch and software, and each GPU's baseline."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_dispatch import options
from pytest_dispatch.errors import DispatchWarning

if TYPE_CHECKING:
    from pytest_dispatch.judgement import gate
    from pytest_dispatch.measurement.gpu import GpuInfo
    from pytest_dispatch.measurement.instructions import Software

SHOWN_NAMES = 8  # saved names a message lists before "..."


def counts_instructions(config: pytest.Config) -> bool:
    """Counted mode is asked for and this process runs under callgrind, or is the pytest-xdist
    controller of workers that do."""
    if not options.of(config).dispatch_instructions:
        return False
    from pytest_dispatch.measurement import instructions

    if instructions.session_counter() is not None:
        return True
    return not hasattr(config, "workerinput") and instructions.counted_in_here() == instructions.COUNTED_IN_WORKERS


def counted_software(counted: bool, gpu: "GpuInfo") -> "Software | None":
    """In counted mode (``counted``), the software this session counts with, else None."""
    if not counted:
        return None
    from pytest_dispatch.measurement import instructions

    return instructions.Software.here(gpu)


class Baselines:
    """``--dispatch-compare``: the baseline of each GPU the session's tests run on, loaded once, when
    the first test of that GPU needs it (wgpu-py's adapter at collection, a page's GPU at its first
    test, since the browser starts only then); each measurement is judged against its own GPU's.

    A saved run that cannot be read raises ``StorageError``; the caller says where."""

    def __init__(self, config: pytest.Config, counted: bool) -> None:
        from pytest_dispatch import storage

        values = options.of(config)
        self.counted = counted  # counted mode: counted runs are the baselines, never timed ones
        self.name = values.dispatch_compare
        self.store = storage.BaselineStore(values.dispatch_storage)
        self.tolerance = values.dispatch_instructions_tolerance
        self._loaded: dict[str, tuple["GpuInfo", "gate.Baseline | None", "gate.Gate | None"]] = {}
        self.skipped: list[str] = []  # one line per stored run that could not be read

    def refuse_unknown_name(self) -> None:
        """A name no saved run has, while others are saved (a typo, another branch's name): say so
        with the names there are, before any test runs. An empty storage is a first run: the
        session runs, budgets are checked and the reporter says that nothing was compared."""
        store, name = self.store, self.name
        if name == "latest":
            return
        saved = sorted({store.name_of(path) for path in store.files(None)})
        if saved and store.safe_name(name) not in saved:
            from pytest_dispatch.presentation.text import first_names

            shown = first_names(saved, SHOWN_NAMES)
            raise pytest.UsageError(f"--dispatch-compare={name}: no saved run is named {store.safe_name(name)!r} in "
                                    f"{store.root}/; the saved names are {shown} (or save one with "
                                    f"--dispatch-save={name})")

    def newest_runs(self) -> list[tuple[Path, dict[str, Any]]]:
        """The newest saved run of this name and of this session's kind (counted or timed), of each
        GPU in the storage: before any GPU is chosen, what the collected tests could be compared with."""
        found = (self.store.newest(fingerprint, self.name, self.counted) for fingerprint in self.store.fingerprints())
        return [run for run in found if run is not None]

    def of(self, gpu: "GpuInfo") -> "gate.Baseline | None":
        """The baseline of ``gpu``'s measurements (None: no saved run of this name and kind)."""
        return self._load(gpu)[1]

    def gate(self, gpu: "GpuInfo") -> "gate.Gate | None":
        """The gate over ``gpu``'s baseline, with the session's tolerance of counted instructions."""
        return self._load(gpu)[2]

    def _load(self, gpu: "GpuInfo") -> tuple["GpuInfo", "gate.Baseline | None", "gate.Gate | None"]:
        if gpu.fingerprint not in self._loaded:
            baseline = self._find(gpu)
            self._loaded[gpu.fingerprint] = (
                gpu, baseline, None if baseline is None else baseline.gate(instruction_tolerance=self.tolerance))
        return self._loaded[gpu.fingerprint]

    def _find(self, gpu: "GpuInfo") -> "gate.Baseline | None":
        from pytest_dispatch.storage import baselines, saved

        from pytest_dispatch.presentation.text import printable

        with warnings.catch_warnings(record=True) as caught:  # a stored run that cannot be read: one line at the end
            warnings.simplefilter("always", DispatchWarning)
            try:
                found = baselines.find_baseline(self.store, gpu.fingerprint, self.name,
                                                software=counted_software(self.counted, gpu))
            finally:
                skipped = [printable(str(w.message)) for w in caught if saved.skipped(w)]
                self.skipped = list(dict.fromkeys([*self.skipped, *skipped]))
                others = {str(w.message): w for w in caught if not saved.skipped(w)}.values()  # each once
        for w in others:  # once recording stopped: a warning given while recording is recorded again, endlessly
            warnings.warn_explicit(w.category(printable(str(w.message))), w.category, w.filename, w.lineno)
        return found
