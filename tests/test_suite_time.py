"""benchmarks/suite_time.py: the suite's wall time against its target, and the CPU seconds the
run took (pytest and every process it waited for), the figure a shared machine moves least."""

import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BUSY_TEST = """
import subprocess, sys

def test_busy_in_a_child():
    # CPU spent in a process the test waits for: counted in the run's CPU seconds
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.5\\n"
                    "while time.process_time() < end: pass"], check=True)
"""


def test_the_run_is_timed_against_the_target_with_its_cpu_seconds(tmp_path, monkeypatch, capsys):
    (tmp_path / "test_busy.py").write_text(BUSY_TEST)
    monkeypatch.chdir(tmp_path)
    main = runpy.run_path(str(ROOT / "benchmarks" / "suite_time.py"))["main"]
    code = main(["--target", "0.01", "--workers", "0", "--", "test_busy.py"])
    out = capsys.readouterr().out
    assert code == 1, out  # over its target
    line = re.search(r"suite_time: ([\d.]+) s wall \(target 0.01 s\), ([\d.]+) CPU s;", out)
    assert line, out
    assert float(line.group(2)) >= 0.5 and float(line.group(1)) >= 0.5, out
    assert "1 passed" in out


def test_a_failed_test_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "test_fails.py").write_text("def test_fails():\n    assert 1 == 2\n\ndef test_passes():\n    pass\n")
    monkeypatch.chdir(tmp_path)
    main = runpy.run_path(str(ROOT / "benchmarks" / "suite_time.py"))["main"]
    code = main(["--workers", "0", "--", "test_fails.py"])
    out = capsys.readouterr().out
    assert code == 2, out  # pytest itself failed
    assert "FAILED test_fails.py::test_fails" in out and "test_passes" not in out, out
