"""The README's example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_marker_example_passes(pytester, gpu_info):
    (example,) = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[:1]
    pytester.makepyfile(test_readme_example=example)
    result = pytester.runpytest("--dispatch-report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*decode_step_budget * 99 * 1 *"])
