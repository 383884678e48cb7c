"""Counted mode's windows, environment, software fingerprint, verdicts, budgets and helper:
how instructions per call are sized, counted and judged (the dumps' reading is in test_instructions.py)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from helpers import DUMP, environment_size

from pytest_dispatch.errors import Unavailable
from pytest_dispatch.judgement import budget, gate
from pytest_dispatch.errors import UsageError
from pytest_dispatch.judgement.results import TestResult, observations
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.measurement import instructions, recorder
from pytest_dispatch.measurement.instructions import Dump, InstructionCount, Software, launch, windows
from pytest_dispatch.measurement.meter import SEQUENTIAL, Measurement


def test_warm_up_runs_enough_dispatches_counting_the_calls_already_made():
    assert instructions.warm_calls(100) == instructions.WARM_DISPATCHES // 100
    assert instructions.warm_calls(0) == instructions.WARM_DISPATCHES  # no dispatches: calls count
    # the timed warm-up and the check rounds (6 calls of a decode step) are part of it
    assert instructions.warm_calls(879, made=6) == -(-instructions.WARM_DISPATCHES // 879) - 6
    assert instructions.warm_calls(10 * instructions.WARM_DISPATCHES, made=3) == 0
    # a decode step allowed 10 more calls: half of them at most while the windows are unsized,
    # then what the windows leave
    assert instructions.warm_calls(100, max_calls=10) == 5
    assert instructions.warm_calls(100, max_calls=150, windows=1 + 36) == 100
    assert instructions.warm_calls(100, max_calls=100, windows=1 + 36) == 63


@pytest.mark.parametrize("path, layer", [
    ("/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0", "interpreter"),
    ("/usr/bin/python3.12", "interpreter"),
    ("/x/site-packages/_cffi_backend.cpython-312-x86_64-linux-gnu.so", "cffi"),
    ("/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2", "cffi"),
    ("/x/site-packages/wgpudawn/_lib/_wgpu_dawn.abi3.so", "wgpu"),
    ("/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.580.159.04", "driver"),
    ("/usr/lib/x86_64-linux-gnu/libvulkan.so.1.3.239", "driver"),
    ("/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1", "driver"),
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", "libc"),
    ("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "libc"),
    ("/usr/lib/x86_64-linux-gnu/libcrypto.so.3", "other"),
    ("???", "other"),
])
def test_each_object_file_has_its_layer(path, layer):
    assert instructions.layer_of(path) == layer


@pytest.mark.parametrize("function, kind", [
    ("wgpu_core::command::compute::<impl wgpu_core::global::Global>::compute_pass_dispatch_workgroups", "dispatch"),
    ("wgpu_core::command::compute::<impl wgpu_core::global::Global>::compute_pass_dispatch_workgroups_indirect",
     "dispatch_indirect"),
    ("wgpu_core::device::global::<impl wgpu_core::global::Global>::device_create_command_encoder", "encoder"),
    ("wgpu_core::command::compute::<impl wgpu_core::global::Global>::compute_pass_set_bind_group", "set_bind_group"),
    ("wgpu_core::command::compute::<impl wgpu_core::global::Global>::compute_pass_end", "end_pass"),
    ("dawn::native::QueueBase::APISubmit(unsigned int, dawn::native::CommandBufferBase* const*)", "submit"),
    ("dawn::native::CommandEncoder::APIFinish(dawn::native::CommandBufferDescriptor const*)", "finish"),
    ("wgpuQueueWriteBuffer", "write"),
    ("alloc::sync::Arc<T,A>::drop_slow", "release"),
    ("__rustc::__rust_alloc", "other"),
])
def test_an_entry_into_wgpu_is_charged_to_its_call_kind(function, kind):
    assert instructions.kind_of_entry(function) == kind


def _dump(total: int, **layers: int) -> Dump:
    by_object = {"/usr/lib/libpython3.11.so": total - sum(layers.values())}
    by_object.update({f"/usr/lib/{name}.so": value for name, value in layers.items()})
    return Dump(total, by_object, {"queue_submit": layers.get("libvulkan_lvp", 0)})


def test_the_per_call_cost_is_the_slope_of_the_windows_and_the_fixed_part_its_intercept():
    sizes = [10, 20, 10, 20]
    dumps = [_dump(7_000 + 1_234 * n, libvulkan_lvp=300 * n) for n in sizes]
    count = InstructionCount.from_windows(sizes, dumps, "callgrind 3.19.0")
    assert count.per_call == pytest.approx(1_234)
    assert count.fixed == pytest.approx(7_000)
    assert count.spread == pytest.approx(0)
    assert count.by_layer["driver"] == pytest.approx(300)
    assert sum(count.by_layer.values()) == pytest.approx(count.per_call)
    assert count.by_kind["submit"] == pytest.approx(300)
    assert count.per_dispatch(4) == pytest.approx(1_234 / 4)
    assert InstructionCount.from_dict(count.as_dict()) == count


def test_spread_is_how_far_the_pairs_of_windows_disagree():
    sizes = [10, 20, 10, 20]
    totals = [10_000, 20_000, 10_000, 20_100]  # slopes 1,000 and 1,010
    count = InstructionCount.from_windows(sizes, [Dump(t, {"x": t}, {}) for t in totals])
    assert count.spread == pytest.approx(10 / count.per_call)
    one_pair = InstructionCount.from_windows([1, 2], [Dump(t, {"x": t}, {}) for t in (10_000, 20_000)])
    assert one_pair.spread is None  # nothing to compare it with: not "0%"


def test_a_call_that_fills_a_window_alone_is_counted_in_one_pair_of_windows():
    assert instructions.window_sizes(3, 1_000) == [3, 6] * instructions.WINDOW_PAIRS
    assert instructions.window_sizes(1, instructions.WINDOW_INSTRUCTIONS / 2) == [1, 2] * instructions.WINDOW_PAIRS
    assert instructions.window_sizes(1, instructions.WINDOW_INSTRUCTIONS) == [1, 2]


@pytest.mark.parametrize("k", [1, 2, 7])
def test_every_window_plan_measures_the_same_slope_either_side_of_the_one_call_window(k):
    # A call's count moves ~0.3% between processes, so a call near WINDOW_INSTRUCTIONS is sized
    # either side of it from one run to the next: both plans must be pairs of K and 2K calls, or
    # the plan's own bias flips the count (a window of 1 call less an empty one read 0.28% less
    # than the 2-1 slope for a 20M decode step on lavapipe: docs/RESULTS.md §11).
    for per_call in (instructions.WINDOW_INSTRUCTIONS * 0.999, instructions.WINDOW_INSTRUCTIONS * 1.001):
        sizes = instructions.window_sizes(k if per_call < instructions.WINDOW_INSTRUCTIONS else 1, per_call)
        pairs = list(zip(sizes[::2], sizes[1::2]))
        assert pairs and all(big == 2 * small >= 2 for small, big in pairs), sizes


def test_a_window_holds_enough_instructions_and_submits():
    assert instructions.window_calls(instructions.WINDOW_INSTRUCTIONS / 4, 0) == 4
    assert instructions.window_calls(instructions.WINDOW_INSTRUCTIONS * 3, 0) == 1
    assert instructions.window_calls(10, 0) == instructions.MAX_WINDOW_CALLS
    light = instructions.WINDOW_INSTRUCTIONS / 1000
    assert instructions.window_calls(light, 1) == 1000
    assert instructions.window_calls(light, instructions.WINDOW_SUBMITS * 2) == 1000
    assert instructions.window_calls(light * 100, 1) == instructions.WINDOW_SUBMITS
    # a call that fills a window alone: one call, however few submits it makes
    assert instructions.window_calls(instructions.WINDOW_INSTRUCTIONS, 1) == 1
    # what the warm-up leaves of the calls allowed: the probe and 6K windows
    assert instructions.window_calls(1_000, 1, max_calls=10, warm=5) == 1
    assert instructions.window_calls(1_000, 1, max_calls=150, warm=75) == (150 - 75 - 1) // 6


@pytest.mark.parametrize("per_call, dispatches, made", [(1_000_000, 50, 30), (2_000_000, 100, 8), (50_000, 3, 0)])
def test_the_budget_asked_gives_the_windows_the_rules_ask_for(per_call, dispatches, made):
    asked = instructions.window_calls(per_call, 1)
    budget = instructions.call_budget_for(asked, dispatches, made)
    warm = instructions.warm_calls(dispatches, made, budget)
    assert instructions.window_calls(per_call, 1, max_calls=budget, warm=warm) == asked
    fewer = budget - 1  # the smallest such budget
    assert instructions.window_calls(per_call, 1, max_calls=fewer,
                                     warm=instructions.warm_calls(dispatches, made, fewer)) < asked


def test_a_count_keeps_the_budget_its_windows_asked_for():
    dumps = [Dump(t, {"x": t}, {}) for t in (10_000, 20_000, 10_000, 20_000)]
    cut = InstructionCount.from_windows([1, 2, 1, 2], dumps, call_budget_asked=331)
    assert InstructionCount.from_dict(cut.as_dict()) == cut and cut.as_dict()["call_budget_asked"] == 331
    older = cut.as_dict()
    del older["call_budget_asked"]
    assert InstructionCount.from_dict(older).call_budget_asked is None


def test_the_environment_is_fixed_and_padded_to_one_size():
    short = {"PATH": "/usr/bin", "HOME": "/root", "PYTHONPERFSUPPORT": "1", "PYTHONHASHSEED": "123"}
    long = {**short, "UNRELATED_VARIABLE": "x" * 300, "HOME": "/home/a/much/longer/checkout/path"}
    args_short = ["valgrind", "python", "-m", "pytest", "t"]
    args_long = ["valgrind", "python", "-m", "pytest", "tests/perf/test_a_much_longer_name.py"]
    env_short = instructions.fixed_environment(short, args_short, "/tmp/d", "valgrind-3.19.0")
    env_long = instructions.fixed_environment(long, args_long, "/tmp/dumps-elsewhere", "valgrind-3.19.0")
    assert environment_size(env_short, args_short) == environment_size(env_long, args_long) == instructions.ENVIRONMENT_BYTES
    for env in (env_short, env_long):
        assert env["PYTHONHASHSEED"] == "0" and env["PYTHONMALLOC"] == "pymalloc"
        assert "glibc.malloc.tcache_count=0" in env["GLIBC_TUNABLES"]
        assert "PYTHONPERFSUPPORT" not in env
    assert env_long["UNRELATED_VARIABLE"] == "x" * 300  # the user's variables stay
    assert env_short[instructions.COUNTED_ENV] == "/tmp/d"


def test_an_environment_larger_than_the_target_is_padded_to_the_next_page():
    big = {"BIG": "y" * (instructions.ENVIRONMENT_BYTES + 100)}
    env = instructions.fixed_environment(big, ["python"], "/tmp/d", "valgrind-3.19.0")
    size = environment_size(env, ["python"])
    assert size > instructions.ENVIRONMENT_BYTES and (size - instructions.ENVIRONMENT_BYTES) % 4096 == 0


SOFTWARE = Software(python="CPython 3.11.7", wgpu="0.32.0", implementation="wgpu-native 0.32.0", backend="Vulkan",
                    adapter="llvmpipe (LLVM 15.0.6, 256 bits)", driver="Mesa 22.3.6", valgrind="valgrind-3.19.0",
                    cpu_vendor="GenuineIntel", machine="x86_64", numpy="2.4.6")


def test_software_fingerprints_and_what_differs():
    other = dataclasses.replace(SOFTWARE, python="CPython 3.12.1", driver="Mesa 24.0.0")
    assert other.fingerprint != SOFTWARE.fingerprint
    assert other.differences(SOFTWARE) == ["python CPython 3.11.7 -> CPython 3.12.1",
                                           "driver Mesa 22.3.6 -> Mesa 24.0.0"]
    assert Software.from_dict(SOFTWARE.as_dict()) == SOFTWARE
    # a run counted by earlier rules (before allocations had a price) is not compared with this one
    earlier = {key: value for key, value in SOFTWARE.as_dict().items() if key not in ("counting", "fingerprint")}
    assert SOFTWARE.differences(Software.from_dict(earlier)) == [f"counting ? -> {instructions.COUNTING_RULES}"]


def test_runs_counted_in_pytest_xdist_workers_are_not_compared_with_a_session_s_own(monkeypatch):
    monkeypatch.delenv(instructions.WORKER_LAUNCHER_ENV, raising=False)
    assert instructions.counted_in_here() == instructions.COUNTED_IN_SESSION
    monkeypatch.setenv(instructions.WORKER_LAUNCHER_ENV, '["valgrind"]')
    assert instructions.counted_in_here() == instructions.COUNTED_IN_WORKERS
    in_workers = dataclasses.replace(SOFTWARE, counted_in=instructions.COUNTED_IN_WORKERS)
    assert in_workers.differences(SOFTWARE) == [
        f"counted_in {instructions.COUNTED_IN_SESSION} -> {instructions.COUNTED_IN_WORKERS}"]
    # saved before the field existed, when pytest-xdist's workers started otherwise: a session's own
    saved_before = {key: value for key, value in in_workers.as_dict().items() if key not in ("counted_in", "fingerprint")}
    assert Software.from_dict(saved_before) == SOFTWARE


def _measurement(per_call: float | None, dispatches: int = 10) -> Measurement:
    count = None if per_call is None else InstructionCount(per_call, 0.0, ((1, int(per_call)), (2, int(2 * per_call))),
                                                           {}, {})
    calls = dict.fromkeys(recorder.KINDS, 0) | {"dispatch": dispatches, "submit": 1, "pass": 1, "encoder": 1}
    empty = np.zeros(0)
    return Measurement(name="fn", method=SEQUENTIAL, warmup=3, rounds=0, per_round=5, calls=calls,
                       by_kernel={"k": dispatches}, host_us_per_call=empty, wall_us_per_call=empty, sync_us=empty,
                       host_breakdown_us_per_call={}, instructions=count)


@pytest.mark.parametrize("ratio, status", [
    (1.0, Status.UNCHANGED), (1.004, Status.UNCHANGED), (0.996, Status.UNCHANGED),
    (1.006, Status.REGRESSED), (1.01, Status.REGRESSED), (0.99, Status.IMPROVED),
])
def test_instructions_are_judged_against_the_tolerance_alone(ratio, status):
    verdict = gate.compare_instructions(_measurement(1e6), _measurement(1e6 * ratio), 0.005, [])
    assert verdict.status == status
    assert verdict.failed == (status == Status.REGRESSED)
    assert "host instructions per call" in verdict.line("fn instructions_per_call")


def test_instructions_of_other_software_or_of_an_uncounted_baseline_are_not_judged():
    other = gate.compare_instructions(_measurement(1e6), _measurement(2e6), 0.005, ["python 3.11 -> 3.12"])
    assert other.status == Status.INCOMPARABLE and not other.failed and "python 3.11 -> 3.12" in other.reason
    timed = gate.compare_instructions(_measurement(None), _measurement(2e6), 0.005, None)
    assert timed.status == Status.OFF and not timed.failed and "--dispatch-instructions --dispatch-save" in timed.reason


def test_the_gate_fails_a_counted_regression_and_judges_no_timing():
    baseline = TestResult("t.py::test_a", [_measurement(1e6)], call={})
    current = TestResult("t.py::test_a", [_measurement(1.02e6)], call={})
    verdicts = gate.Gate([baseline], comparable=True, software_differences=[],
                         instruction_tolerance=0.005).judge(current)
    assert not verdicts.timing
    (line,) = verdicts.failure_lines
    assert line.startswith("fn instructions_per_call regressed: 1,000,000 -> 1,020,000")
    assert verdicts.as_dict()["instructions"]["t.py::test_a::fn"]["status"] == "regressed"


def test_an_instruction_budget_is_checked_in_counted_mode_only():
    parsed = budget.parse_budget((), {"instructions_per_dispatch": 50_000})
    assert parsed.instructions_per_dispatch == 50_000
    over = TestResult("t.py::test_a", [_measurement(600_000, dispatches=10)], call={})
    failure = budget.judge(parsed, observations(over))
    assert failure is not None and "60,000 host instructions per dispatch (counted) > 50,000 allowed" in failure.message
    assert budget.judge(parsed, observations(TestResult("t.py::test_a", [_measurement(400_000)], call={}))) is None
    assert budget.judge(parsed, observations(TestResult("t.py::test_a", [_measurement(None)], call={}))) is None
    with pytest.raises(UsageError, match="instructions_per_dispatch"):
        budget.parse_budget((), {"instructions_per_dispatch": -1})


def test_without_valgrind_the_session_says_so_and_runs_timed(pytester, monkeypatch):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    monkeypatch.setenv("PATH", str(pytester.path))  # no valgrind there
    monkeypatch.delenv(instructions.COUNTED_ENV, raising=False)
    result = pytester.runpytest("--dispatch-instructions", "-W", "default")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*--dispatch-instructions: valgrind is not on PATH (Debian/Ubuntu: apt-get install "
                                 "valgrind); this session is timed, not counted*"])


def test_the_helper_builds_against_callgrind_h_where_valgrind_is(tmp_path, monkeypatch):
    if not os.path.exists("/usr/include/valgrind/callgrind.h"):
        pytest.skip("valgrind's callgrind.h is not installed (apt-get install valgrind)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = instructions.build_helper(instructions.valgrind_executable())
    assert path.is_relative_to(tmp_path) and path.exists()
    helper = instructions.Helper(path)
    assert not helper.running_on_valgrind()  # outside Valgrind every request is a no-op
    helper.window_open()
    helper.window_close(b"nothing")
    assert instructions.build_helper() == path  # built once


def test_a_missing_compiler_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(launch, "valgrind_version", lambda valgrind: "valgrind-0.0.test")
    with pytest.raises(Unavailable, match="cannot build the callgrind helper"):
        instructions.build_helper("/usr/bin/valgrind")


def test_a_window_dump_is_kept_where_asked_and_deleted_otherwise(tmp_path, monkeypatch):
    text = DUMP.replace("window 1", "window 7")
    for keep in (None, tmp_path / "kept"):
        dump = tmp_path / "callgrind.123.7"
        dump.write_text(text)
        if keep is None:
            monkeypatch.delenv(instructions.KEEP_DUMPS_ENV, raising=False)
        else:
            monkeypatch.setenv(instructions.KEEP_DUMPS_ENV, str(keep))
        assert instructions.Counter._read(dump, "pytest-dispatch window 7").instructions == 800
        assert not dump.exists()
    assert (tmp_path / "kept" / "callgrind.123.7.7").read_text() == text


def test_the_verbose_breakdown_shows_allocations_and_cycles_only_where_counted():
    from pytest_dispatch.presentation.report import counted_breakdown_lines

    plain = _measurement(1_000_000.0)
    with_cycles = dataclasses.replace(plain, instructions=dataclasses.replace(
        plain.instructions, allocator_calls_per_call=1234.0, estimated_cycles_per_call=2_500_000.0))
    text = "\n".join(counted_breakdown_lines(with_cycles, width=200))
    assert f"allocator calls/call 1,234 (counted at {instructions.ALLOCATION_PRICE} instructions each)" in text
    assert "estimated cycles/call 2,500,000" in text
    old_run = dataclasses.replace(plain, instructions=dataclasses.replace(plain.instructions, allocation_price=None))
    assert not any("cycles" in line or "allocator" in line for line in counted_breakdown_lines(old_run, width=200))



def test_a_stripped_interpreter_s_unnamed_functions_are_measured_and_named_in_the_report():
    stripped = DUMP.replace("fn=(1) _PyEval_EvalFrameDefault", "fn=(1) 0x0000000000572500")
    assert instructions.parse_dump(stripped.splitlines()).unnamed_interpreter == 300
    assert instructions.parse_dump(DUMP.splitlines()).unnamed_interpreter == 0
    # an unnamed function elsewhere (a stripped driver) is not the interpreter's
    driver = DUMP.replace("fn=(5)\n0 60", "fn=(9) 0x0000000000001000\n0 60")
    assert instructions.parse_dump(driver.splitlines()).unnamed_interpreter == 0
    sizes = [10, 20]
    dumps = [dataclasses.replace(_dump(1_000 * n), unnamed_interpreter=u * n) for u in (5, 50) for n in sizes]
    named, stripped_count = (InstructionCount.from_windows(sizes, dumps[i:i + 2]) for i in (0, 2))
    assert not named.interpreter_unnamed and stripped_count.interpreter_unnamed
    assert stripped_count.unnamed_interpreter_per_call == pytest.approx(50)
    assert InstructionCount.from_dict(stripped_count.as_dict()) == stripped_count
    from pytest_dispatch.presentation import report

    plain = _measurement(1_000_000.0)
    for unnamed, shown in ((0.0, False), (200_000.0, True)):
        measurement = dataclasses.replace(plain, instructions=dataclasses.replace(
            plain.instructions, unnamed_interpreter_per_call=unnamed))
        text = " ".join(report.render([TestResult("t.py::test_x", [measurement], {})], None, "adapter: test",
                                      width=200))
        assert ("this Python has no names for its internal functions" in text) is shown


class _DumpingHelper:
    """Callgrind's part, faked: each window's dump holds 1,000 instructions a call run in it."""

    def __init__(self, folder) -> None:
        self.folder, self.events, self.calls_in_window, self.windows = folder, [], 0, 0

    def start_instrumentation(self) -> None:
        self.events.append("start")

    def stop_instrumentation(self) -> None:
        self.events.append("stop")

    def window_open(self) -> None:
        self.calls_in_window = 0
        self.events.append("open")

    def window_close(self, label: bytes) -> None:
        self.windows += 1
        cost = 1000 * self.calls_in_window
        (self.folder / f"callgrind.{os.getpid()}.{self.windows}").write_text(
            f"desc: Trigger: Client Request: {label.decode()}\nevents: Ir\nsummary: {cost}\n"
            f"ob=(1) /usr/lib/libpython3.11.so.1.0\nfn=(1) _PyEval_EvalFrameDefault\n0 {cost}\n")
        self.events.append(f"close {self.calls_in_window}")


def test_the_probe_that_sizes_the_windows_can_be_their_first(tmp_path):
    helper = _DumpingHelper(tmp_path)
    counter = instructions.Counter(helper, tmp_path)

    def run(calls: int) -> None:
        helper.calls_in_window += calls
        helper.events.append(f"run {calls}")

    seen = []

    def more(totals):
        seen.append(totals)
        return 0, [2, 1, 2]

    dumps = counter.count(run, [1], lambda: None, warm=4, more=more)
    assert seen == [[1000]]  # the probe's instructions, read from its summary line alone
    assert [d.instructions for d in dumps] == [1000, 2000, 1000, 2000]
    # the warm-up uninstrumented, then one instrumented stretch for the probe and the windows
    assert helper.events == ["run 4", "start", "open", "run 1", "close 1", "open", "run 2", "close 2",
                             "open", "run 1", "close 1", "open", "run 2", "close 2", "stop"]


def test_windows_larger_than_the_probe_come_after_more_uncounted_calls(tmp_path):
    helper = _DumpingHelper(tmp_path)
    counter = instructions.Counter(helper, tmp_path)

    def run(calls: int) -> None:
        helper.calls_in_window += calls
        helper.events.append(f"run {calls}")

    dumps = counter.count(run, [1], lambda: None, warm=2, more=lambda totals: (5, [3, 6]))
    assert [d.instructions for d in dumps] == [1000, 3000, 6000]  # the probe's dump too: the caller drops it
    assert helper.events == ["run 2", "start", "open", "run 1", "close 1", "stop", "run 5", "start",
                             "open", "run 3", "close 3", "open", "run 6", "close 6", "stop"]


class _PooledDevice:
    """wgpu-core's pool of finished command encoders, modelled: a stack, drawn from the top
    (or a new encoder where it is empty), an encoder dropped goes back on top."""

    def __init__(self, pool: list[str]) -> None:
        self.pool, self.made = list(pool), 0

    def create_command_encoder(self) -> "_PooledEncoder":
        if not self.pool:
            self.made += 1
        return _PooledEncoder(self, self.pool.pop() if self.pool else f"new {self.made}")


class _PooledEncoder:
    def __init__(self, device: _PooledDevice, name: str) -> None:
        self.device, self.name = device, name

    def __del__(self) -> None:
        self.device.pool.append(self.name)


def test_a_counted_measurement_draws_new_encoders_whatever_earlier_calls_left_in_the_pool():
    # bottom to top; the two on top were left by a test whose submissions retired in any order
    device = _PooledDevice(["d0", "left, many passes", "left"])
    instructions.set_aside_pooled_encoders(device, encoders=4)
    assert device.pool == [] and device.made == 1
    assert [device.create_command_encoder().name for _ in range(2)] == ["new 2", "new 2"]
    instructions.set_aside_pooled_encoders(device, encoders=4)  # the next measurement's too
    assert device.pool == [] and device.made == 5
    aside = device.__dict__.pop(windows._ENCODERS_ASIDE)
    assert sorted(e.name for e in aside) == ["d0", "left", "left, many passes", "new 1", "new 2", "new 3",
                                             "new 4", "new 5"]
    del aside  # kept no longer than the device: then returned
    assert len(device.pool) == 8
