"""Mistakes caught where they are made: a misspelt marker, bad WGSL, a file that is no results file."""

import pytest

BROKEN_WGSL = '''
SOURCE = """@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * 3.0
}
"""

def test_compiles(gpu_device):
    gpu_device.create_shader_module(label="tripled_by_hand", code=SOURCE)
'''


@pytest.mark.parametrize("name, hint", [
    ("dispatch_budgt", "did you mean @pytest.mark.dispatch_budget?"),
    ("dispatch_timeing", "did you mean @pytest.mark.dispatch_timing?"),
    ("dispatchbudget", "did you mean @pytest.mark.dispatch_budget?"),
    ("dispatch_everything", "pytest-dispatch's markers are dispatch_budget, dispatch_timing"),
])
def test_a_misspelt_marker_is_a_usage_error_with_a_suggestion(pytester, name, hint):
    pytester.makepyfile(f"import pytest\n@pytest.mark.{name}(dispatches=2)\ndef test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *::test_x: @pytest.mark.{name} is not a pytest-dispatch marker; {hint}"])


def test_other_markers_are_left_alone(pytester):
    pytester.makepyfile("import pytest\n@pytest.mark.slow\n@pytest.mark.dispatch_budget(dispatches=0)\n"
                        "def test_x():\n    pass\n")
    pytester.runpytest("-W", "ignore::pytest.PytestUnknownMarkWarning").assert_outcomes(passed=1)


def test_a_wgsl_error_names_shader_line_column_and_shows_the_source_with_a_caret(pytester, gpu_info):
    pytester.makepyfile(test_shader=BROKEN_WGSL)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "test_shader.py:10: WGSL parsing error in shader 'tripled_by_hand' at line 6, column 1: expected `;`*",
        "  5 |     data[id.x] = data[id.x] * 3.0",
        "  6 | }",
        "    | ^",
    ])
    output = result.stdout.str()
    assert "_api.py" not in output and "wgpuDeviceCreateShaderModule" not in output and "Caused by" not in output


def test_a_wgsl_error_in_a_fixture_reads_the_same(pytester, gpu_info):
    pytester.makepyfile(test_shader=BROKEN_WGSL.replace("def test_compiles(gpu_device):", "import pytest\n"
                        "@pytest.fixture\ndef kernel(gpu_device):") + "\ndef test_uses(kernel):\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*WGSL parsing error in shader 'tripled_by_hand' at line 6, column 1*"])
    assert "_api.py" not in result.stdout.str()


def test_the_caret_sits_under_the_column_given():
    from pytest_dispatch.plugin import shader_errors

    class GPUValidationError(Exception):
        __module__ = "wgpu._classes"

    error = GPUValidationError("Validation Error\n\nShader 'k' parsing error: unknown type `f64`\n"
                               "  ┌─ wgsl:2:13\n  │\n2 │ var<private> a: f64;\n  │             ^ here")
    assert shader_errors.is_shader_error(error)
    text = shader_errors.describe(error, source="// one\nvar<private> a: f64;\n")
    assert text.splitlines() == ["WGSL parsing error in shader 'k' at line 2, column 13: unknown type `f64`",
                                 "  1 | // one", "  2 | var<private> a: f64;", "    |             ^"]
    assert shader_errors.describe(error).splitlines()[1:] == ["  2 | var<private> a: f64;", "    |             ^"]


@pytest.mark.parametrize("content, advice", [
    ('{"results": []}', "give a file written by --dispatch-json or --dispatch-save"),
    ('{"pytest_dispatch": {"schema": 99}}', "re-save it"),
    ('{"pytest_dispatch": {"schema": 2, "tests": []}}', "re-save it"),
    ('{"pytest_dispatch": {"schema": 4, "tests": [{"nodeid": 3}]}}', "delete it or save a new run"),
    ('{"pytest_dispatch": {"schema": 4, "tests": [], "runs": 7}}', "delete it or save a new run"),
    ("{not json", "delete it or save a new baseline"),
])
def test_every_refused_file_says_what_to_do(tmp_path, capsys, content, advice):
    from pytest_dispatch import cli
    from pytest_dispatch.judgement.status import ExitCode

    path = tmp_path / "odd.json"
    path.write_text(content)
    assert cli.main(["show", str(path)]) == ExitCode.BAD_INPUT
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and str(path) in error and advice in error


def test_a_missing_file_or_a_folder_says_what_to_give(tmp_path):
    from pytest_dispatch import storage
    from pytest_dispatch.errors import StorageError

    for path, advice in ((tmp_path / "gone.json", "check the path"), (tmp_path, "give one of its .json files")):
        with pytest.raises(StorageError, match=advice):
            storage.load_document(path)


def test_an_unversioned_run_is_listed_as_unversioned_and_long_names_whole(tmp_path, capsys):
    from pytest_dispatch import cli
    from pytest_dispatch.judgement.status import ExitCode
    from test_history import measurement, save_run

    save_run(tmp_path, 0, [measurement()], commit="unversioned", branch="feature/a-long-branch-name",
             name="nightly-with-a-long-name")
    save_run(tmp_path, 1, [measurement()], commit="0123456789abcdef" * 2 + "01234567")
    assert cli.main(["list", "--storage", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert rows[0].split()[2:5] == ["unversioned", "feature/a-long-branch-name", "nightly-with-a-long-name"]
    assert rows[1].split()[2] == "0123456789"


def _first_python_block(path):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / path).read_text()
    return re.findall(r"```python[^\n]*\n(.*?)```", text, flags=re.S)  # info string: tests/test_docs.py


def test_the_readmes_first_test_shows_the_budgets_one_line_when_its_kernel_dispatches_more(pytester, gpu_info):
    (example,) = _first_python_block("README.md")[:1]
    regressed = example.replace("dispatch_meter.measure(add_one, 40, 1)", "dispatch_meter.measure(add_one, 48, 1)")
    assert regressed != example
    pytester.makepyfile(test_readme_example=regressed)
    result = pytester.runpytest("-k", "test_one_submit and not faster")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["dispatch budget exceeded: 48 dispatches per call > exactly 40 allowed (+8; by "
                                 "kernel: add_one 48)", "FAILED *test_one_submit - dispatch budget exceeded*"])


def test_the_own_kernel_budget_test_shows_the_budgets_one_line_when_a_kernel_runs_twice(pytester, gpu_info):
    from pathlib import Path

    example = (Path(__file__).resolve().parent.parent / "examples" / "test_own_kernel.py").read_text()
    budget_test = example[example.index("@pytest.mark.dispatch_budget"):].split("\n\n\n")[0]
    assert budget_test.strip() in "".join(_first_python_block("docs/own_kernel.md"))  # the guide shows this test
    call = "    def __call__(self) -> None:\n        self.run(self.steps)\n\n\nclass Fused"
    assert example.count(call) == 1
    pytester.makepyfile(test_own_kernel=example.replace(call, call.replace("self.steps)", "self.steps + self.steps[1:2])")))
    result = pytester.runpytest("-k", "budget", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines(["dispatch budget exceeded: 4 dispatches per call > exactly 3 allowed (+1; by kernel: "
                                 "square 2, *)", "FAILED *test_three_steps_budget - dispatch budget exceeded*"])
