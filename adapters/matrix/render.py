"""Matrix's dialect: a message carries its Markdown as `body` (what plain clients and
notifications show) and the same text as HTML in `formatted_body`
(`org.matrix.custom.html`), rendered with markdown-it-py; raw HTML in the model's text
is escaped, never passed on."""

from __future__ import annotations

from markdown_it import MarkdownIt

_HTML = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["strikethrough", "table"])


def to_html(markdown: str) -> str:
    html: str = _HTML.render(markdown)
    return html.strip()


__all__ = ["to_html"]
