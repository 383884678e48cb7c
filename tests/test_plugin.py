"""Plugin behaviour through pytester: options, ini twins, skip/error paths, header."""

import pytest


GPU_TEST = """
def test_uses_gpu(gpu_device, gpu_info):
    assert gpu_info.fingerprint
"""


def test_header_names_the_adapter_once_gpu_tests_are_collected(pytester, gpu_info):
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["collected 1 item", f"dispatch: {gpu_info.adapter_name}*via {gpu_info.backend}*"])
    pytester.makepyfile("def test_uses_gpu(): pass")
    assert "dispatch:" not in pytester.runpytest().stdout.str()


def test_gpu_fixtures_work(pytester, gpu_info):
    pytester.makepyfile(GPU_TEST)
    pytester.runpytest().assert_outcomes(passed=1)


def test_no_matching_adapter_skips_with_a_one_line_reason(pytester):
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest("--gpu-adapter", "no-such-gpu-xyz", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no WebGPU adapter: tried wgpu-native, backend auto, adapter matching 'no-such-gpu-xyz'; found: *"])
    result.stdout.fnmatch_lines(["dispatch: no WebGPU adapter*"])


def test_gpu_required_turns_the_skip_into_an_error(pytester):
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest("--gpu-adapter", "no-such-gpu-xyz", "--gpu-required")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no WebGPU adapter*(--gpu-required)*"])


def test_ini_twins_apply(pytester):
    pytester.makeini("[pytest]\ngpu_adapter = no-such-gpu-xyz\ngpu_required = true\n")
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)


def test_command_line_overrides_ini(pytester, gpu_info):
    pytester.makeini("[pytest]\ngpu_adapter = no-such-gpu-xyz\n")
    pytester.makepyfile(GPU_TEST)
    pytester.runpytest("--gpu-adapter", gpu_info.adapter_name[:6]).assert_outcomes(passed=1)


def test_backend_filter(pytester, gpu_info):
    pytester.makepyfile(GPU_TEST)
    pytester.runpytest("--gpu-backend", gpu_info.backend.lower()).assert_outcomes(passed=1)
    other = "metal" if gpu_info.backend.lower() != "metal" else "d3d12"
    result = pytester.runpytest("--gpu-backend", other, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*tried wgpu-native, backend {other}*"])


def test_bad_ini_value_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\ngpu_backend = vulcan\n")
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gpu_backend = 'vulcan': choose one of auto, vulkan, metal, d3d12, opengl*"])


def test_bad_command_line_choice_is_a_usage_error(pytester):
    result = pytester.runpytest("--gpu-impl", "webgl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_dawn_without_its_package_or_adapter_skips_with_reason(pytester):
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest("--gpu-impl", "dawn", "-rs", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    if outcomes.get("passed"):
        pytest.skip("Dawn finds an adapter on this machine")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*tried dawn, backend auto*"])


def test_wgpu_error_log_fails_the_test(pytester, gpu_info):
    pytester.makepyfile(
        """
        import logging
        def test_logs_error():
            logging.getLogger("wgpu").error("Device lost: simulated")
        def test_warning_is_fine():
            logging.getLogger("wgpu").warning("just a warning")
        """
    )
    # In a subprocess: in-process, the inner test's records would reach this test's handler too.
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*wgpu logged an error during the test: Device lost: simulated*"])


def test_call_phase_counts_are_stashed_for_every_test(pytester, gpu_info):
    pytester.makeconftest(
        """
        import pytest
        from pytest_dispatch.plugin import CALL_COUNTS_KEY
        @pytest.hookimpl(trylast=True)
        def pytest_runtest_teardown(item):
            print(f"COUNTS {item.name} {item.stash[CALL_COUNTS_KEY].dispatches}")
        """
    )
    pytester.makepyfile(
        """
        from pytest_dispatch.workloads import AddOne
        def test_three(gpu_device):
            AddOne(gpu_device).submit_per_dispatch(3)
        def test_none():
            pass
        """
    )
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*COUNTS test_three 3*", "*COUNTS test_none 0*"])


@pytest.mark.parametrize("flag", ["--dispatch-compare=", "--dispatch-save=", "--dispatch-compare= "])
def test_an_empty_baseline_name_is_a_usage_error_before_any_test(pytester, flag):
    pytester.makepyfile("def test_x(tmp_path_factory):\n    open('ran', 'w').close()\n")
    result = pytester.runpytest(flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument {flag.strip().rstrip('=')}: an empty name; give one, or leave the option out*"])
    assert not (pytester.path / "ran").exists()


def test_an_unknown_baseline_name_is_refused_before_any_test_naming_the_saved_ones(pytester):
    folder = pytester.path / "store" / "some-gpu"
    folder.mkdir(parents=True)
    for name in ("main", "nightly"):
        (folder / f"20260101T000000Z_abc_{name}.json").write_text("{}")
    pytester.makepyfile("def test_x():\n    open('ran', 'w').close()\n")
    result = pytester.runpytest("--dispatch-compare=mian", "--dispatch-storage=store")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --dispatch-compare=mian: no saved run is named 'mian' in store/; "
                                 "the saved names are main, nightly (or save one with --dispatch-save=mian)"])
    assert not (pytester.path / "ran").exists()
    pytester.runpytest("--dispatch-compare=mian", "--dispatch-storage=store",
                       "--dispatch-accept").assert_outcomes(passed=1)  # accepting names a new baseline


def test_a_baseline_that_holds_none_of_this_runs_measurements_does_not_pass(pytester, gpu_info):
    from helpers import measurement
    from pytest_dispatch import storage
    from pytest_dispatch.judgement.results import TestResult

    gone = TestResult("test_new.py::test_gone", [measurement("old")], call={})
    storage.BaselineStore(pytester.path / "store").save(storage.session_json([gone], gpu_info), "main")
    pytester.makepyfile(test_new="""
from pytest_dispatch.workloads import AddOne

def test_gone():
    pass

def test_fresh(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 4, rounds=2, name="fresh")
""")
    # test_gone is collected, so the gate can only tell at the end that -k left nothing it knows
    result = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store", "-k", "fresh")
    result.assert_outcomes(passed=1, deselected=1)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["dispatch gate: no measurement of this run has a baseline in *: this run measured "
                                 "1 (test_new.py::test_fresh::fresh), the baseline holds 1 "
                                 "(test_new.py::test_gone::old); nothing was compared*"])


def test_a_baseline_that_holds_none_of_the_collected_tests_stops_before_they_run(pytester, gpu_info):
    from helpers import measurement
    from pytest_dispatch import storage
    from pytest_dispatch.judgement.results import TestResult

    gone = TestResult("test_old.py::test_gone", [measurement("old")], call={})
    storage.BaselineStore(pytester.path / "store").save(storage.session_json([gone], gpu_info), "main")
    pytester.makepyfile(test_new="def test_fresh(gpu_device):\n    open('ran', 'w').close()\n")
    result = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --dispatch-compare: no collected test is in the baseline *: 1 "
                                 "(test_new.py::test_fresh) collected, the baseline holds 1 "
                                 "(test_old.py::test_gone::old); nothing would be compared*"])
    assert not (pytester.path / "ran").exists() and "dispatch gate" not in result.stdout.str()  # the one line only
