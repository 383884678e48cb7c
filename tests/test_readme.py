"""The README's example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_first_test_passes(pytester, gpu_info):
    (example,) = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[:1]
    pytester.makepyfile(test_readme_example=example)
    result = pytester.runpytest("--dispatch-report")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*one_submit*40*1*ok", "*speedup of one submit over 40 submits: *"])


def test_readme_is_a_users_guide():
    text = README.read_text()
    assert len(text.splitlines()) <= 230 and "OWNER" not in text
    assert "make demo" in text and "make test" in text and "pytest examples --dispatch-report" in text
