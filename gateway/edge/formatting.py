"""The model's Markdown, converted with a real parser (markdown-it-py) into a platform's
dialect.

A platform package describes its dialect (a `Dialect`: how it marks emphasis, code,
links, headings and quotes, and what it escapes); `render` walks the parsed Markdown
once for every dialect. Telegram's HTML subset lives in adapters/telegram/render.py,
Slack's mrkdwn in adapters/slack/render.py; Discord takes Markdown as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark").enable("strikethrough")


@dataclass(frozen=True, slots=True)
class Dialect:
    inline: Mapping[str, str]  # strong/em/s open and close marks, by token type
    escape: Callable[[str], str]  # plain text as the platform must receive it
    code_block: Callable[[str, str], str]  # (content, language) -> the block
    code_inline: Callable[[str], str]  # the content -> the span
    link: Callable[[str], tuple[str, str]]  # href -> (opening mark, closing mark)
    heading: tuple[str, str]  # a heading's line is marked as strong text
    blockquote: tuple[str, str]


def render(markdown: str, dialect: Dialect) -> str:  # noqa: PLR0912 - one branch per token
    out: list[str] = []
    lists: list[list[int]] = []  # a counter per open list (ordered) or [-1] (bullets)
    for token in _PARSER.parse(markdown):
        kind = token.type
        if kind == "inline":
            out.append(_inline(token.children or [], dialect))
        elif kind in ("paragraph_close", "heading_close"):
            out.append(dialect.heading[1] if kind == "heading_close" else "")
            out.append("\n" if lists else "\n\n")
        elif kind == "heading_open":
            out.append(dialect.heading[0])
        elif kind in ("fence", "code_block"):
            language = token.info.strip().split(" ")[0]
            out.append(dialect.code_block(token.content, language) + "\n\n")
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
            out.append(dialect.blockquote[0])
        elif kind == "blockquote_close":
            while out and not out[-1].strip():
                out.pop()
            out.append(dialect.blockquote[1])
        elif kind == "hr":
            out.append("———\n\n")
        elif kind == "html_block":
            out.append(dialect.escape(token.content))
    return "".join(out).strip()


def _inline(children: list[Token], dialect: Dialect) -> str:
    parts: list[str] = []
    closing_link = ""
    for child in children:
        kind = child.type
        if kind == "text":
            parts.append(dialect.escape(child.content))
        elif kind == "code_inline":
            parts.append(dialect.code_inline(child.content))
        elif kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind == "link_open":
            opening, closing_link = dialect.link(str(child.attrGet("href") or ""))
            parts.append(opening)
        elif kind == "link_close":
            parts.append(closing_link)
        elif kind == "image":
            parts.append(dialect.escape(child.content or str(child.attrGet("alt") or "")))
        elif kind == "html_inline":
            parts.append(dialect.escape(child.content))
        else:
            parts.append(dialect.inline.get(kind, ""))
    return "".join(parts)
