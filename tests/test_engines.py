"""``pytest-dispatch engines``: one workload in every engine of the machine, counts equal everywhere,
an adapter that computes nothing refused, fewer than two engines never a pass."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

from pathlib import Path

import pytest

from pytest_dispatch import cli
from pytest_dispatch.cli import engines
from pytest_dispatch.errors import Unavailable
from pytest_dispatch.judgement.status import ExitCode
from pytest_dispatch.measurement import script
from pytest_dispatch.measurement.gpu import GpuInfo

ROOT = Path(__file__).resolve().parent.parent
CPU = GpuInfo("deno", "2.9.8", "WebGPU in Deno", "llvmpipe", "", 0, 0, "", "CPU")


def row(engine: str, dispatches: int = 10, submits: int = 10) -> engines.EngineRow:
    calls = {"dispatch": dispatches, "submit": submits, "pass": dispatches, "encoder": dispatches}
    return engines.EngineRow(engine, CPU, "a sync", calls, 40.0, 400.0, 300.0)


def test_counts_that_differ_between_engines_are_named():
    assert engines.counts_differ([row("deno"), row("node")]) == []
    assert engines.counts_differ([row("deno"), row("node", submits=1), row("chromium")]) == ["node"]


def test_the_table_has_a_row_per_engine_and_a_line_per_engine_not_measured():
    lines = engines.render([row("deno"), row("node")], ["chromium: none found"], engines.Workload("sequential", 10))
    assert lines[1].split()[:2] == ["engine", "adapter"]
    assert [line.split()[0] for line in lines[3:5]] == ["deno", "node"]
    assert "10/10/10/10" in lines[3] and lines[3].split()[-3:] == ["40.0", "400.0", "300.0"]
    assert lines[-1] == "not measured: chromium: none found"


def test_an_adapter_that_computes_nothing_is_refused():
    engines._refuse_unless_computed("deno", [3.0, 3.0, 3.0, 3.0])
    with pytest.raises(Unavailable, match="deno: its adapter computes nothing .* refused, not measured"):
        engines._refuse_unless_computed("deno", [0.0, 0.0, 0.0, 0.0])
    with pytest.raises(Unavailable):
        engines._refuse_unless_computed("deno", [])


def test_an_unknown_engine_is_bad_input(capsys):
    assert cli.main(["engines", "--engines", "deno,safari"]) == ExitCode.BAD_INPUT
    assert "--engines takes some of wgpu-native,dawn,chromium,firefox,deno,node (not safari)" in capsys.readouterr().err


def _available(*names: str) -> list[str]:
    found = [name for name in names if script.executable(name)]
    if len(found) < len(names):
        pytest.skip(f"needs {', '.join(names)}")
    return found


@pytest.mark.slow
@pytest.mark.gpu
def test_the_engines_count_the_workload_alike(tmp_path, capsys):
    _available("deno", "node")
    out = tmp_path / "engines.json"
    code = cli.main(["engines", "--engines", "wgpu-native,deno,node", "--n", "10", "--rounds", "3", "--json", str(out)])
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    measured = [entry["engine"] for entry in document["engines"]]
    if len(measured) < 3:
        pytest.skip(f"not measured here: {document['not_measured']}")
    assert code == ExitCode.OK
    assert measured == ["wgpu-native", "deno", "node"]
    for entry in document["engines"]:
        calls = entry["calls_per_call"]
        assert (calls["dispatch"], calls["submit"], calls["pass"], calls["encoder"]) == (10, 10, 10, 10)
        # 10 dispatches a call against a sync of up to 11 ms (Deno's): on a busy machine the sequential
        # figure, the median sync subtracted, can be within the sync's noise: then it is no figure at all
        sequential = entry["sequential_us_per_dispatch"]
        assert entry["single_op_us"] > 0 and (sequential is None or sequential > 0)
    fingerprints = {entry["gpu"]["fingerprint"] for entry in document["engines"]}
    assert len(fingerprints) == 3  # each engine its own GPU, even on the same adapter
    assert "on every device of the script" in printed


@pytest.mark.gpu
def test_one_engine_is_never_a_pass(capsys):
    _available("deno")
    code = cli.main(["engines", "--engines", "deno", "--n", "5", "--rounds", "2"])
    captured = capsys.readouterr()
    if "not measured: deno" in captured.out:
        pytest.skip(captured.out.splitlines()[-1])
    assert code == ExitCode.NOTHING_COMPARED
    assert "1 engine measured: counts compared with no other engine" in captured.err


def test_a_playwright_that_cannot_drive_firefox_says_which_can(monkeypatch):
    from pytest_dispatch.plugin import engines as page_engines

    monkeypatch.setattr(page_engines.importlib.metadata, "version", lambda name: "1.65.3")
    assert page_engines.unavailable_reason() == (
        "firefox: Playwright 1.65.3 cannot drive Firefox ESR over BiDi (it works from 1.58 to before 1.65); "
        "pip install 'pytest-dispatch[firefox]'")
    monkeypatch.setattr(page_engines.importlib.metadata, "version", lambda name: "1.64.1")
    monkeypatch.setattr(page_engines, "find_firefox", lambda: None)
    assert page_engines.unavailable_reason() == ("firefox: none found (tried firefox-esr, firefox); "
                                                 "apt-get install firefox-esr")


def test_an_engine_whose_sync_is_a_poll_has_no_single_op_figure():
    polled = engines.EngineRow("firefox", CPU, "a poll", row("deno").calls, 30.0, None, 100_000.0,
                               method="slope between N=10 and N=10010")
    lines = engines.render([row("deno"), polled], [], engines.Workload("sequential", 10))
    assert lines[4].split()[-3:] == ["30.0", "-", "100000.0"]
    assert "sequential, firefox: slope between N=10 and N=10010; single-op not measured (it would be the sync)" in lines


@pytest.mark.slow
@pytest.mark.gpu
def test_firefox_counts_the_workload_as_deno_does(tmp_path):
    from pytest_dispatch.plugin import engines as page_engines

    if page_engines.unavailable_reason():
        pytest.skip(page_engines.unavailable_reason())
    _available("deno")
    out = tmp_path / "engines.json"
    # a process of its own, as the command runs: Playwright's sync API takes no second start in a process
    # (a gpu_page test of this pytest-xdist worker may hold one); one round: each call of the slope's
    # second N is 10020 dispatches in Firefox, and counts need no spread
    done = subprocess.run([sys.executable, "-c", "import sys; from pytest_dispatch.cli import main; sys.exit(main())",
                           "engines", "--engines", "firefox,deno", "--n", "20", "--rounds", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    document = json.loads(out.read_text())
    assert document["not_measured"] == [] and done.returncode == ExitCode.OK, done.stderr
    firefox, deno = document["engines"]
    assert firefox["calls_per_call"] == deno["calls_per_call"] and firefox["calls_per_call"]["dispatch"] == 20
    assert firefox["single_op_us"] is None and firefox["method"] == "slope between N=20 and N=10020"
    assert firefox["gpu"]["implementation"] == "firefox" and "polls for completion" in firefox["sync_method"]


@pytest.mark.slow
@pytest.mark.gpu
def test_the_decode_step_is_counted_alike_with_the_same_tokens():
    _available("deno")
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "engines_decode.py"), "--engines",
                           "wgpu-native,deno", "--rounds", "2"], capture_output=True, text=True, timeout=400)
    if "not measured" in done.stdout:
        pytest.skip(done.stdout.splitlines()[-1])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[5:7]] == ["wgpu-native", "deno"]
    assert all("99/1/1/1" in line for line in lines[5:7])  # dispatches, submits, passes, encoders a decode step
    tokens = [line.split(": ", 1)[1] for line in lines if line.startswith("greedy tokens, ")]
    assert len(tokens) == 2 and tokens[0] == tokens[1]


def test_greedy_tokens_that_differ_between_engines_are_named():
    same = dataclasses.replace(row("deno"), tokens=(1, 2))
    assert engines.counts_differ([same, dataclasses.replace(row("node"), tokens=(1, 2))]) == []
    assert engines.counts_differ([same, dataclasses.replace(row("node"), tokens=(1, 3))]) == ["node"]


def test_what_native_libraries_print_is_held_back_unless_verbose(monkeypatch, capfd):
    def noisy(impl, workload, rounds):
        os.write(2, b"Warning: a native library's line\n")  # as Dawn's C++ writes to the process's stderr
        raise Unavailable(f"{impl}: no adapter here")

    monkeypatch.setattr(engines, "native_row", noisy)
    assert cli.main(["engines", "--engines", "wgpu-native,dawn"]) == ExitCode.NOTHING_COMPARED
    err = capfd.readouterr().err
    assert "Warning: a native" not in err and "2 line(s) of native library output hidden (-v shows them)" in err
    assert cli.main(["engines", "--engines", "wgpu-native,dawn", "-v"]) == ExitCode.NOTHING_COMPARED
    assert "engines: native library: Warning: a native library's line" in capfd.readouterr().err


class _Polled:
    """A workload function of an engine whose sync is a 100 ms poll: 50 µs a dispatch; logs its calls."""

    sync_method = "a poll"

    def __init__(self, n: int, log: list[tuple[int, str]], made: int | None = None) -> None:
        self.n, self.log, self.made = n, log, n if made is None else made
        self.name = f"sequential({n})"

    def counted(self, calls: int, *, gpu_time: bool = False):
        from pytest_dispatch.measurement import recorder
        from pytest_dispatch.measurement.sources import CallCounts

        self.log.append((self.n, "counted"))
        per_call = {"dispatch": self.made, "submit": self.made, "pass": self.made, "encoder": self.made}
        return CallCounts.of(recorder.Counts.from_dict({"calls": {kind: count * calls for kind, count in per_call.items()},
                                                        "by_kernel": {"add_one": self.made * calls}}))

    def timed_round(self, calls: int):
        from pytest_dispatch.measurement.sources import RoundTime

        self.log.append((self.n, "timed"))
        return RoundTime(wall_ns=100_000_000 + calls * self.n * 50_000, sync_ns=100_000_000, host_ns=0)

    def sync(self) -> None:
        pass

    def runs_on(self):
        return None


def test_a_polled_engine_times_the_second_n_after_counting_it_once():
    log: list[tuple[int, str]] = []
    row = engines._slope_row("firefox", CPU, lambda target, n: _Polled(n, log), 20, 4)
    assert row.sequential_us == pytest.approx(50.0) and row.calls["dispatch"] == 20
    assert row.method == "slope between N=20 and N=10020"
    # the second N: one counted call (its dispatches checked), then half the rounds, timed; nothing else
    assert [kind for n, kind in log if n == 10_020] == ["counted"] + ["timed"] * 2
    log.clear()
    engines._slope_row("firefox", CPU, lambda target, n: _Polled(n, log), 20, 1)
    assert [kind for n, kind in log if n == 10_020] == ["counted", "timed"]  # never none
    with pytest.raises(Unavailable, match="firefox: a call of N=10020 made 10019 dispatches, not 10020: no slope"):
        engines._slope_row("firefox", CPU, lambda target, n: _Polled(n, log, made=n - (n > 20)), 20, 4)


class _NoSlope(_Polled):
    """A round's time that does not grow with N: the poll's noise is all there is."""

    def timed_round(self, calls: int):
        from pytest_dispatch.measurement.sources import RoundTime

        return RoundTime(wall_ns=100_000_000 + calls * 1_000_000, sync_ns=100_000_000, host_ns=0)


def test_a_figure_at_or_below_0_is_shown_as_within_the_syncs_noise_never_as_a_number():
    row = engines._slope_row("firefox", CPU, lambda target, n: _NoSlope(n, []), 20, 4)
    assert row.sequential_us is None and row.as_dict()["sequential_us_per_dispatch"] is None
    lines = engines.render([row], [], engines.Workload("sequential", n=20))
    assert lines[3].split()[-3] == "-"  # the sequential column
    assert ("sequential, firefox: µs per dispatch within the sync's noise (it came out at or below 0): the calls "
            "take less time than the sync varies; give a larger --n") in lines
