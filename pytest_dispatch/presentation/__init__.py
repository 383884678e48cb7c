"""Text for people: the terminal report, Markdown, HTML and SVG; it reads verdicts and decides nothing."""
