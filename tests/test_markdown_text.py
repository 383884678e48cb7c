"""Markdown made from data (names, branches, messages) shows the data and nothing else: no HTML,
link, image or emphasis survives, a code span cannot be closed from inside, a `|` stays in its cell."""

import re

from pytest_dispatch.presentation.text import markdown_code, markdown_table, markdown_text

HOSTILE = ('<img src=x onerror=alert(1)> [click](javascript:alert(1)) ![i](http://evil.example/x.png) '
           '*em* _u_ &amp; <script>x</script> https://evil.example `tick` | pipe')


def unescaped(text, chars):
    """The characters of ``chars`` in ``text`` not preceded by a backslash."""
    return re.findall(r"(?<!\\)[" + re.escape(chars) + "]", text)


def test_text_from_data_carries_no_markup():
    rendered = markdown_text(HOSTILE + "\nsecond line")
    assert "\n" not in rendered
    assert not unescaped(rendered, "<>[]()!*_&`:")
    assert rendered.replace("\\", "") == " ".join((HOSTILE + " second line").split())


def test_a_code_span_cannot_be_closed_from_inside():
    for text in ("a`b", "``x``", "`", "plain", "ends with `"):
        span = markdown_code(text)
        fence = re.match(r"`+", span).group()
        inner = span[len(fence):-len(fence)]
        assert span.endswith(fence) and fence not in inner.strip(), span
        assert inner.strip() == text.strip()


def test_a_pipe_stays_in_its_cell():
    table = markdown_table(("name", "verdict"), [(markdown_code("a|b"), "regressed"), (markdown_text("x|y"), "ok")])
    for line in table[2:]:
        assert len(unescaped(line, "|")) == 3, line  # the row's own three separators
