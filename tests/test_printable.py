"""Names are data: their control characters (a terminal's escape sequences) are printed escaped in
every terminal and text output."""

import types

from helpers import GPU, measurement
from pytest_dispatch import cli
from pytest_dispatch import storage
from pytest_dispatch.judgement.results import TestResult
from pytest_dispatch.plugin.page import GpuPage
from pytest_dispatch.presentation import report
from pytest_dispatch.presentation.text import printable

ESCAPE = "\x1b]0;owned\x07\x1b[2J"  # retitle the terminal, then clear the screen
HOSTILE_NODE = f"tests/test_model.py::test_{ESCAPE}forward"


def test_printable_escapes_control_characters_and_keeps_lines():
    assert printable(f"a{ESCAPE}b\tc\nd\x9b\u202e") == "a\\x1b]0;owned\\x07\\x1b[2Jb\tc\nd\\x9b\\u202e"
    assert printable("µs/dispatch, ok") == "µs/dispatch, ok"


def hostile_document():
    document = storage.session_json([TestResult(HOSTILE_NODE, [measurement(name=f"m{ESCAPE}")], {})], GPU)
    document["commit_info"] = {"id": "abc", "branch": f"main{ESCAPE}", "time": "2026-01-01T00:00:00+00:00"}
    return document


def test_the_command_prints_no_control_character(tmp_path, capsys):
    store = storage.BaselineStore(tmp_path / "store")
    saved = store.save(hostile_document(), "main")
    (saved.parent / f"notes{ESCAPE}.json").write_text("{")  # a foreign file: its name in a warning
    for command in (["list"], ["history"], ["history", "--markdown"], ["show", "latest"], ["prune", "--keep", "1"]):
        assert cli.main([*command, "--storage", str(tmp_path / "store")]) == 0, command
        captured = capsys.readouterr()
        assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out + captured.err, command
        assert "\\x1b" in captured.out + captured.err, command


def test_the_report_prints_no_control_character():
    result = TestResult(HOSTILE_NODE, [measurement(name=f"m{ESCAPE}")], {})
    lines = report.render([result], GPU, "adapter", width=200)
    assert not any("\x1b" in line for line in lines) and any("\\x1b" in line for line in lines)


def test_a_page_message_prints_no_control_character():
    page = GpuPage.__new__(GpuPage)
    page.session = types.SimpleNamespace(server=types.SimpleNamespace(mounted=dict))
    assert page.local_paths(f"Error: {ESCAPE}") == "Error: \\x1b]0;owned\\x07\\x1b[2J"


def test_a_skipped_saved_run_named_with_control_characters_is_one_escaped_line(pytester, gpu_info):
    pytester.makepyfile("""
from pytest_dispatch.workloads import AddOne
def test_measured(dispatch_meter, gpu_device):
    dispatch_meter.measure(AddOne(gpu_device).single_pass, 2, rounds=2)
""")
    pytester.runpytest("--dispatch-save=main", "--dispatch-storage=store").assert_outcomes(passed=1)
    (saved,) = (pytester.path / "store").glob("*/*.json")
    corrupt = saved.with_name(f"00000000_20000101T000000000000Z_abc{ESCAPE}_main.json".replace(";", "-"))
    corrupt.write_text("{")
    result = pytester.runpytest("--dispatch-compare=main", "--dispatch-storage=store")
    result.assert_outcomes(passed=1)
    assert "\x1b" not in result.stdout.str() and "\\x1b" in result.stdout.str()
