"""The model's Markdown, converted with a real parser (markdown-it-py) per platform.

Telegram gets its HTML subset (b, i, s, code, pre, a, blockquote; everything else as
text, `&<>` escaped), Slack gets mrkdwn, Discord takes Markdown as it is.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark").enable("strikethrough")


def to_telegram_html(markdown: str) -> str:
    return _render(markdown, _TELEGRAM_INLINE, _esc, code=_telegram_code)


def to_slack_mrkdwn(markdown: str) -> str:
    return _render(markdown, _SLACK_INLINE, _slack_esc, code=_slack_code)


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _slack_esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _telegram_code(content: str, lang: str) -> str:
    attr = f' class="language-{_esc(lang)}"' if lang else ""
    return f"<pre><code{attr}>{_esc(content.rstrip())}</code></pre>"


def _slack_code(content: str, _lang: str) -> str:
    return f"```\n{_slack_esc(content.rstrip())}\n```"


_TELEGRAM_INLINE = {
    "strong_open": "<b>",
    "strong_close": "</b>",
    "em_open": "<i>",
    "em_close": "</i>",
    "s_open": "<s>",
    "s_close": "</s>",
    "link_close": "</a>",
}
_SLACK_INLINE = {
    "strong_open": "*",
    "strong_close": "*",
    "em_open": "_",
    "em_close": "_",
    "s_open": "~",
    "s_close": "~",
    "link_close": "",
}


def _render(  # noqa: PLR0912 - one branch per Markdown block token, flat on purpose
    markdown: str,
    inline_map: dict[str, str],
    esc: Callable[[str], str],
    code: Callable[[str, str], str],
) -> str:
    out: list[str] = []
    lists: list[list[int]] = []  # a counter per open list (ordered) or [-1] (bullets)
    telegram = inline_map is _TELEGRAM_INLINE
    for token in _PARSER.parse(markdown):
        kind = token.type
        if kind == "inline":
            out.append(_inline(token.children or [], inline_map, esc, telegram))
        elif kind in ("paragraph_close", "heading_close"):
            out.append(("</b>" if telegram else "*") if kind == "heading_close" else "")
            out.append("\n" if lists else "\n\n")
        elif kind == "heading_open":
            out.append("<b>" if telegram else "*")
        elif kind in ("fence", "code_block"):
            out.append(code(token.content, token.info.strip().split(" ")[0]) + "\n\n")
        elif kind == "bullet_list_open":
            lists.append([-1])
        elif kind == "ordered_list_open":
            lists.append([int(token.attrGet("start") or 1)])
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
            if not lists:
                out.append("\n")
        elif kind == "list_item_open":
            counter = lists[-1]
            bullet = "•" if counter[0] < 0 else f"{counter[0]}."
            if counter[0] >= 0:
                counter[0] += 1
            out.append("  " * (len(lists) - 1) + bullet + " ")
        elif kind == "blockquote_open":
            out.append("<blockquote>" if telegram else "> ")
        elif kind == "blockquote_close":
            while out and not out[-1].strip():
                out.pop()
            out.append("</blockquote>\n\n" if telegram else "\n\n")
        elif kind == "hr":
            out.append("———\n\n")
        elif kind == "html_block":
            out.append(esc(token.content))
    return "".join(out).strip()


def _inline(
    children: list[Token], mapping: dict[str, str], esc: Callable[[str], str], telegram: bool
) -> str:
    parts: list[str] = []
    for child in children:
        kind = child.type
        if kind == "text":
            parts.append(esc(child.content))
        elif kind == "code_inline":
            parts.append(f"<code>{esc(child.content)}</code>" if telegram else f"`{child.content}`")
        elif kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind == "link_open":
            href = str(child.attrGet("href") or "")
            parts.append(f'<a href="{html.escape(href)}">' if telegram else f"<{href}|")
            if not telegram:
                mapping = {**mapping, "link_close": ">"}
        elif kind == "image":
            parts.append(esc(child.content or str(child.attrGet("alt") or "")))
        elif kind == "html_inline":
            parts.append(esc(child.content))
        else:
            parts.append(mapping.get(kind, ""))
    return "".join(parts)
