"""Exit codes: defined once (judgement.status.ExitCode), the README's table says what each means
for each command, and each command gives each of its codes (no GPU needed here: the pytest
session's codes are tested with the gate, and the A/B job's in test_ab and test_ci_recipe)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_dispatch import cli
from pytest_dispatch.judgement.status import ExitCode
from test_cli import GPU, measurement, write

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("show", "list", "history", "merge", "prune", "compare", "probe", "ab")


def test_exit_codes_are_defined_once():
    """No module of the package but judgement/status.py names an exit status as a number of its own."""
    defined = []
    for path in (ROOT / "pytest_dispatch").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any(name.startswith("EXIT_") for name in names):
                defined.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert defined == []
    assert [code.value for code in ExitCode] == [0, 1, 2, 3, 4]
    assert int(ExitCode.NOTHING_COMPARED) == int(pytest.ExitCode.USAGE_ERROR)
    assert int(ExitCode.FAILED) == int(pytest.ExitCode.TESTS_FAILED)


def test_the_readme_table_has_a_row_per_code_and_a_column_per_command():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, codes = rows[0], [row.split("|")[1].strip() for row in rows[2:]]
    assert codes == ["0", "1", "2", "4"] and "3, 5: its own" in header  # 3 and 5 are pytest's alone
    for command in COMMANDS:
        assert f"`{command}`" in header or f"`pytest-dispatch {command}`" in header, command


@pytest.fixture
def storage_folder(tmp_path) -> Path:
    from pytest_dispatch import storage
    from pytest_dispatch.judgement.results import TestResult

    store = storage.BaselineStore(tmp_path / "store")
    result = TestResult("tests/test_model.py::test_forward", [measurement()], {"dispatches": 0})
    store.save(storage.session_json([result], GPU), "main")
    return store.root


def test_each_command_gives_each_of_its_codes(tmp_path, storage_folder, capsys):
    good, more = write(tmp_path, "good.json"), write(tmp_path, "more.json", dispatches=12)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text(Path(good).read_text().replace("tests/test_model.py::test_forward", "tests/test_other.py::test_x"))
    store = ["--storage", str(storage_folder)]
    expected = [
        (["show", good], ExitCode.OK), (["show", str(bad)], ExitCode.BAD_INPUT),
        (["list", *store], ExitCode.OK), (["list", *store, "--fingerprint", "no-such-gpu"], ExitCode.BAD_INPUT),
        (["history", *store], ExitCode.OK), (["history", *store, "-k", "no_such_test"], ExitCode.BAD_INPUT),
        (["merge", good, more, "-o", str(tmp_path / "all.json")], ExitCode.OK),
        (["merge", str(bad), "-o", str(tmp_path / "none.json")], ExitCode.BAD_INPUT),
        (["prune", *store, "--keep", "3", "--dry-run"], ExitCode.OK), (["prune", *store, "--keep", "0"], ExitCode.BAD_INPUT),
        (["compare", good, good], ExitCode.OK), (["compare", good, more], ExitCode.FAILED),
        (["compare", good, str(bad)], ExitCode.BAD_INPUT), (["compare", good, str(other)], ExitCode.NOTHING_COMPARED),
        (["probe", "--n", "ten"], ExitCode.BAD_INPUT),
    ]
    for argv, code in expected:
        assert (cli.main(argv), argv) == (code, argv)
        err = capsys.readouterr().err
        if code == ExitCode.BAD_INPUT:  # one line saying what, where; no traceback
            assert re.fullmatch(rf"pytest-dispatch {argv[0]}: [^\n]+\n", err) and "Traceback" not in err, err


def test_an_ab_job_whose_base_has_none_of_the_tests_runs_the_heads_and_passes():
    """The plan and the exit status of the pull request that adds (or renames) every measured test."""
    import types

    from pytest_dispatch.ab import coordinator, verdicts

    def plan(base_ids, head_ids, missing=()):
        job = types.SimpleNamespace(outcome=verdicts.Outcome("base", "head", "gpu", {}), _problem=lambda line: None)
        collected = [{"nodeids": base_ids, "errors": [], "missing": list(missing)},
                     {"nodeids": head_ids, "errors": []}]
        return coordinator.Job._plan(job, collected), job.outcome

    steps, outcome = plan([], ["t.py::test_a", "t.py::test_b"], missing=["tests/perf"])
    assert steps == [("t.py::test_a", (coordinator.HEAD,)), ("t.py::test_b", (coordinator.HEAD,))]
    assert outcome.notices == ["base: tests/perf is not in this tree: its tests run on the head alone"]
    steps, outcome = plan(["t.py::test_old"], ["t.py::test_new"])
    assert outcome.notices == ["base: 1 (t.py::test_old) test(s) the head does not have: not run"]
    outcome.comparisons.append(verdicts.Comparison("t.py::test_new::run", None, measurement()))
    assert outcome.exit_code == ExitCode.OK and outcome.first_run_line().startswith("nothing to compare yet: ")
    outcome.collect_failed = True  # a side that could not collect a file still fails the job
    assert outcome.exit_code == ExitCode.FAILED
    assert verdicts.Outcome("base", "head", "gpu", {}).exit_code == ExitCode.NOTHING_COMPARED  # nothing measured
