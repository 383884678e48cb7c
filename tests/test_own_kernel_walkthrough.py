"""docs/own_kernel.md's steps, run on examples/test_own_kernel.py: budget, measure, save, list, history."""

import json
import shutil
from pathlib import Path

from pytest_dispatch import cli
from pytest_dispatch.measurement.meter import default_name

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "test_own_kernel.py"


def test_saved_runs_of_ones_own_kernel_make_one_series_in_the_history(pytester, gpu_info, capsys):
    shutil.copy(EXAMPLE, pytester.path / EXAMPLE.name)
    for _ in range(2):
        pytester.runpytest("-k", "budget", "--dispatch-save=main", "-p", "no:cacheprovider").assert_outcomes(
            passed=1, deselected=3)
    storage = str(pytester.path / ".dispatch")
    capsys.readouterr()
    assert cli.main(["list", "--storage", storage]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines() if "_unversioned_main.json" in line]
    assert len(listed) == 2 and all(row[2] == "unversioned" and row[4] == "main" for row in listed)
    assert cli.main(["history", "--json", "--storage", storage]) == 0
    (gpu,) = json.loads(capsys.readouterr().out)["gpus"]
    keys = [series["key"] for series in gpu["series"]]
    # the callable object's measurement keeps its name across runs, so the two runs are one series
    assert keys == ["test_own_kernel.py::test_three_steps_budget::ThreeSteps"]
    assert len(gpu["series"][0]["points"]) == 2


def test_a_callable_objects_default_name_is_its_class_not_its_address():
    import functools

    class Job:
        def __call__(self):
            pass

    def step(n):
        pass

    assert default_name(Job()) == default_name(Job()) == "test_a_callable_objects_default_name_is_its_class_not_its_address.<locals>.Job"
    assert default_name(functools.partial(step, 3)).endswith("<locals>.step")
