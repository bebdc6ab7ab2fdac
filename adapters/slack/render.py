"""Slack's mrkdwn, rendered from the model's Markdown (`&<>` escaped as Slack asks)."""

from __future__ import annotations

from gateway.edge.formatting import Dialect, render


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


SLACK_MRKDWN = Dialect(
    inline={
        "strong_open": "*",
        "strong_close": "*",
        "em_open": "_",
        "em_close": "_",
        "s_open": "~",
        "s_close": "~",
    },
    escape=_escape,
    code_block=lambda content, _language: f"```\n{_escape(content.rstrip())}\n```",
    code_inline=lambda content: f"`{content}`",
    link=lambda href: (f"<{href}|", ">"),
    heading=("*", "*"),
    blockquote=("> ", "\n\n"),
)


def to_slack_mrkdwn(markdown: str) -> str:
    return render(markdown, SLACK_MRKDWN)
