"""The pytest-dispatch command on synthetic results files (no GPU needed)."""

import json

import numpy as np
import pytest

from pytest_dispatch import cli
from pytest_dispatch import storage
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


def test_compare_shows_time_without_a_verdict_and_points_to_ab(tmp_path, capsys):
    # a saved run cannot tell a slower run from a regression: separate runs differ by far more
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json", us=400.0, seed=1)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the report wraps long lines
    assert "model us_per_call" in out and "not judged: time: use an A/B job (pytest-dispatch ab)" in out
    assert "us_per_call regressed" not in out and "inconclusive" not in out


def test_compare_count_increase_exits_1(tmp_path, capsys):
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json", dispatches=12)]) == 1
    assert "model dispatches regressed: 10 -> 12 per call (+2: matvec +2)" in capsys.readouterr().out


def test_compare_other_gpu_compares_counts_only(tmp_path, capsys):
    slower_elsewhere = write(tmp_path, "b.json", gpu=OTHER_GPU, us=80.0)
    assert cli.main(["compare", write(tmp_path, "a.json"), slower_elsewhere]) == 0
    assert "not compared: baseline from another GPU" in " ".join(capsys.readouterr().out.split())


def _merge(tmp_path, name, *files):
    path = tmp_path / name
    assert cli.main(["merge", *files, "-o", str(path)]) == 0
    return str(path)


def test_compare_of_merged_files_of_one_run_judges_their_counts(tmp_path, capsys):
    # a merged file holding one run used to compare as empty: an empty table and exit 0 with 4 -> 8
    base = _merge(tmp_path, "base.json", write(tmp_path, "a.json", dispatches=4))
    head = _merge(tmp_path, "head.json", write(tmp_path, "b.json", dispatches=8))
    capsys.readouterr()
    assert cli.main(["compare", base, head]) == 1
    assert "model dispatches regressed: 4 -> 8 per call" in capsys.readouterr().out


def test_compare_with_no_measurement_in_common_is_exit_4_naming_both_sides(tmp_path, capsys):
    base = write(tmp_path, "a.json")
    other = tmp_path / "b.json"
    result = TestResult("tests/test_other.py::test_x", [measurement(dispatches=8)], {"dispatches": 0})
    storage.write_json_atomically(other, storage.session_json([result], GPU))
    assert cli.main(["compare", base, str(other)]) == 4
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("pytest-dispatch compare: nothing compared:")
    assert "baseline has: tests/test_model.py::test_forward::model" in line
    assert "current has: tests/test_other.py::test_x::model" in line and not captured.out


def test_compare_against_an_empty_run_is_exit_4(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    storage.write_json_atomically(empty, storage.session_json([], GPU))
    assert cli.main(["compare", write(tmp_path, "a.json", dispatches=4), str(empty)]) == 4
    assert "current has: none" in capsys.readouterr().err


def test_compare_of_a_merged_file_of_several_runs_is_one_line_exit_2(tmp_path, capsys):
    merged = _merge(tmp_path, "m.json", write(tmp_path, "a.json"), write(tmp_path, "b.json", gpu=OTHER_GPU))
    capsys.readouterr()
    assert cli.main(["compare", merged, write(tmp_path, "c.json")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "a merged file of 2 runs; compare takes one run on each side" in line


def test_show_markdown(tmp_path, capsys):
    assert cli.main(["show", write(tmp_path, "a.json"), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "### Test GPU \\(DiscreteGPU\\) via Vulkan" in out
    assert "| `tests/test_model.py::test_forward` `model` | 10 | 1 |" in out


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
    assert "model dispatches regressed\\: 10 \\-\\> 12" in rows[0] and "other" not in rows[0].split("|", 2)[2]
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


def test_settings_take_the_same_syntax_as_the_pytest_flags(tmp_path, capsys):
    assert cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json"),
                     "--instructions-tolerance", "1%"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["compare", write(tmp_path, "a.json"), write(tmp_path, "b.json"), "--instructions-tolerance", "2"])
    assert exit_info.value.code == 2
    assert "must be between 0 and 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["compare", "a.json", "b.json"], ["history"]])
@pytest.mark.parametrize("flag", ["--alpha", "--threshold"])
def test_compare_and_history_have_no_timing_verdict_settings(command, flag):
    # saved runs judge no time: the settings of that judgement are gone
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([*command, flag, "0.01"])


def test_a_name_resolves_on_the_gpu_of_a_merged_file_of_one_run(tmp_path, capsys):
    store = storage.BaselineStore(tmp_path / "store")
    for gpu in (GPU, OTHER_GPU):
        store.save(storage.session_json([TestResult("tests/test_model.py::test_forward", [measurement()], {})], gpu),
                   "main")
    merged = _merge(tmp_path, "m.json", write(tmp_path, "a.json", dispatches=12))
    assert cli.main(["compare", "main", merged, "--storage", str(tmp_path / "store")]) == 1
    assert "model dispatches regressed: 10 -> 12 per call" in capsys.readouterr().out
