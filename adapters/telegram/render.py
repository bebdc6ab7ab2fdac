"""Telegram's HTML subset (b, i, s, code, pre, a, blockquote; everything else as text,
`&<>` escaped), rendered from the model's Markdown."""

from __future__ import annotations

import html

from gateway.edge.formatting import Dialect, render


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _code_block(content: str, language: str) -> str:
    attr = f' class="language-{_escape(language)}"' if language else ""
    return f"<pre><code{attr}>{_escape(content.rstrip())}</code></pre>"


TELEGRAM_HTML = Dialect(
    inline={
        "strong_open": "<b>",
        "strong_close": "</b>",
        "em_open": "<i>",
        "em_close": "</i>",
        "s_open": "<s>",
        "s_close": "</s>",
    },
    escape=_escape,
    code_block=_code_block,
    code_inline=lambda content: f"<code>{_escape(content)}</code>",
    link=lambda href: (f'<a href="{html.escape(href)}">', "</a>"),
    heading=("<b>", "</b>"),
    blockquote=("<blockquote>", "</blockquote>\n\n"),
)


def to_telegram_html(markdown: str) -> str:
    return render(markdown, TELEGRAM_HTML)
