"""The pytest-dispatch command on synthetic results files (no GPU needed)."""

import json

import numpy as np
import pytest

from pytest_dispatch import cli
from pytest_dispatch.judgement import storage
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.measurement import recorder
from pytest_dispatch.measurement.gpu import GpuInfo
from pytest_dispatch.measurement.meter import Measurement

GPU = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "Test GPU", "acme", 1, 2, "driver 1", "DiscreteGPU")
OTHER_GPU = GpuInfo("wgpu-native", "0.32.0", "Vulkan", "Other GPU", "acme", 1, 3, "driver 1", "DiscreteGPU")


def measurement(dispatches=10, us=40.0, seed=0, rounds=20):
    rng = np.random.default_rng(seed)
    wall = us * dispatches * rng.lognormal(0, 0.03, rounds)
    calls = dict.fromkeys(recorder.KINDS, 0)
    calls.update(dispatch=dispatches, submit=1, encoder=1, pass_=0)
    calls["pass"] = 1
    del calls["pass_"]
    return Measurement("model", "sequential", 3, rounds, 5, calls, {"matvec": dispatches}, wall * 0.5, wall,
                       np.full(rounds, 180.0), dict.fromkeys(recorder.KINDS, 1.0))


def write(tmp_path, name, gpu=GPU, **kwargs):
    result = TestResult("tests/test_model.py::test_forward", [measurement(**kwargs)], {"dispatches": 0})
    path = tmp_path / name
    storage.write_json_atomically(path, storage.session_json([result], gpu))
    return str(path)


def test_compare_unchanged_exits_0(tmp_path, capsys):
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json", seed=1)]) == 0
    assert "unchanged" in capsys.readouterr().out


def test_compare_timing_against_one_run_is_inconclusive_and_points_to_ab(tmp_path, capsys):
    # one stored run cannot tell a slower run from a regression: separate runs differ by far more
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json", us=48.0, seed=1)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the report wraps long lines
    assert "model us_per_call inconclusive:" in out and "use an A/B job" in out


def test_compare_count_increase_exits_1(tmp_path, capsys):
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json", dispatches=12)]) == 1
    assert "model dispatches regressed: 10 -> 12 per call (+2: matvec +2)" in capsys.readouterr().out


def test_compare_other_gpu_is_incomparable_for_timing(tmp_path, capsys):
    slower_elsewhere = write(tmp_path, "b.json", gpu=OTHER_GPU, us=80.0)
    assert cli.main(["compare", write(tmp_path, "a.json"), slower_elsewhere]) == 0
    assert "incomparable" in capsys.readouterr().out


def test_show_markdown(tmp_path, capsys):
    assert cli.main(["show", write(tmp_path, "a.json"), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "### Test GPU (DiscreteGPU) via Vulkan" in out
    assert "| `tests/test_model.py::test_forward` [model] | 10 | 1 |" in out


def test_merge_groups_runs_by_gpu(tmp_path, capsys):
    out_path = tmp_path / "merged.json"
    files = [write(tmp_path, "a.json"), write(tmp_path, "b.json", gpu=OTHER_GPU), write(tmp_path, "c.json")]
    assert cli.main(["merge", *files, "-o", str(out_path)]) == 0
    assert "merged 3 run(s) of 2 GPU(s)" in capsys.readouterr().out
    merged = json.loads(out_path.read_text())
    fingerprints = [run["machine_info"]["gpu_fingerprint"] for run in merged["pytest_dispatch"]["runs"]]
    assert fingerprints == sorted(fingerprints) and len(set(fingerprints)) == 2
    assert len(merged["benchmarks"]) == 3
    assert cli.main(["show", str(out_path), "--markdown"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("### ") == 3 and "Other GPU" in shown


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["pytest_dispatch"]["tests"][0]["measurements"][0]["wall_us_per_call"].__setitem__(0, "fast"),
        lambda d: d["pytest_dispatch"]["tests"][0]["measurements"][0]["calls_per_call"].__setitem__("dispatch", 10**400),
        lambda d: d["pytest_dispatch"]["tests"][0]["measurements"][0].__setitem__("wall_us_per_call", []),
        lambda d: d["pytest_dispatch"]["tests"][0].__setitem__("measurements", {"a": 1}),
        lambda d: d["pytest_dispatch"]["tests"][0].__setitem__("nodeid", ["x"]),
        lambda d: d["pytest_dispatch"].__setitem__("tests", None),
        lambda d: d["pytest_dispatch"].__setitem__("schema", "1"),
    ],
)
@pytest.mark.parametrize("command", ["show", "compare", "merge"])
def test_hostile_json_is_exit_2_without_traceback(tmp_path, capsys, mutate, command):
    good = write(tmp_path, "good.json")
    document = json.loads(open(good).read())
    mutate(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    argv = {"show": ["show", str(bad)], "compare": ["compare", good, str(bad)],
            "merge": ["merge", good, str(bad), "-o", str(tmp_path / "m.json")]}[command]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-dispatch {command}: ") and "bad.json" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_huge_float_literal_and_missing_file(tmp_path, capsys):
    bad = tmp_path / "inf.json"
    bad.write_text('{"pytest_dispatch": {"schema": 1, "tests": [], "x": 1e999}}')
    assert cli.main(["show", str(bad)]) == 2
    assert cli.main(["show", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert "out of range" in err and "no such file" in err


def test_a_bad_run_inside_a_merged_file_is_exit_2(tmp_path, capsys):
    merged = tmp_path / "merged.json"
    assert cli.main(["merge", write(tmp_path, "a.json"), "-o", str(merged)]) == 0
    document = json.loads(merged.read_text())
    document["pytest_dispatch"]["runs"][0]["pytest_dispatch"]["schema"] = 7
    merged.write_text(json.dumps(document))
    assert cli.main(["show", str(merged)]) == 2
    assert "runs[0]: unknown schema 7" in capsys.readouterr().err


def two_measurement_file(tmp_path, name, dispatches):
    first, second = measurement(dispatches=dispatches), measurement(seed=1)
    second.name = "other"
    result = TestResult("tests/test_model.py::test_forward", [first, second], {"dispatches": 0})
    path = tmp_path / name
    storage.write_json_atomically(path, storage.session_json([result], GPU))
    return str(path)


def test_markdown_has_one_row_per_measurement_with_its_own_verdicts(tmp_path, capsys):
    base, new = two_measurement_file(tmp_path, "a.json", 10), two_measurement_file(tmp_path, "b.json", 12)
    assert cli.main(["compare", base, new, "--markdown"]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `tests/")]
    assert len(rows) == 2
    assert "model dispatches regressed: 10 -> 12" in rows[0] and "other" not in rows[0].split("|", 2)[2]
    assert "other counts unchanged" in rows[1] and "regressed" not in rows[1]


def test_accept_hint_only_when_nothing_regressed_and_with_the_cli_command(tmp_path, capsys):
    base = write(tmp_path, "a.json")
    assert cli.main(["compare", base, write(tmp_path, "fewer.json", dispatches=8)]) == 0
    out = capsys.readouterr().out
    assert f"improvements found; make CURRENT the baseline to accept them: cp {tmp_path}/fewer.json {base}" in out
    assert "--dispatch-accept" not in out
    mixed = two_measurement_file(tmp_path, "mixed.json", 12)
    mixed_doc = json.loads(open(mixed).read())
    mixed_doc["pytest_dispatch"]["tests"][0]["measurements"][1]["calls_per_call"]["dispatch"] = 8
    mixed_doc["pytest_dispatch"]["tests"][0]["measurements"][1]["by_kernel_per_call"] = {"matvec": 8}
    open(mixed, "w").write(json.dumps(mixed_doc))
    assert cli.main(["compare", two_measurement_file(tmp_path, "b2.json", 10), mixed]) == 1
    out = capsys.readouterr().out
    assert "other dispatches improved" in out and "improvements found" not in out


def test_every_cli_option_says_what_it_does():
    import argparse

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"pytest-dispatch {name} {action.dest}: no help text"


@pytest.mark.slow
def test_settings_take_the_same_syntax_as_the_pytest_flags(tmp_path, capsys):
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json"), "--threshold", "5%"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json"), "--alpha", "2"])
    assert exit_info.value.code == 2
    assert "alpha='2' must be between 0 and 0.5" in capsys.readouterr().err
