"""The README is a user's guide of a readable length (tests/test_docs.py runs its code blocks)."""

from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_is_a_users_guide():
    text = README.read_text()
    assert len(text.splitlines()) <= 200 and "OWNER" not in text
    assert "make demo" in text and "make test" in text and "pytest examples --dispatch-report" in text
