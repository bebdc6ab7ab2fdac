"""The `message` tool: the assistant sends a message to another chat for the person it
is talking to, and the ports through which it asks a person before doing something.

Where it may send (`Target`): the person's own linked accounts on the other platforms
(`to: "slack"` is their direct chat with the bot there; the `message` capability), and
the chats the owner named in config.yaml's `message.chats` (`to: "family"`; each its own
capability, `message:<name>`, the owner alone until allowed). The gateway's side
(gateway/pipeline/confirmations.py) sends through the same delivery path as replies,
asks the person with a button before the first message to a chat, and stores what was
sent in the target chat's conversation, saying where it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hermes.config import TARGET
from hermes.places import Surface
from hermes.tools.capabilities import MESSAGE_PREFIX, Holder


@dataclass(frozen=True, slots=True)
class Target:
    """A chat to send to: `kind` "user" (that account's direct chat) or "chat"."""

    name: str  # what the model says: a platform (own account) or a named chat
    platform: str
    kind: str
    id: str
    own: bool  # one of the person's own linked accounts

    @property
    def subject(self) -> str:
        """What a yes to the first message consents to (later ones go without asking)."""
        return f"message:{self.platform}:{self.kind}:{self.id}"

    @property
    def group(self) -> str:
        """The capability it needs beside `message` ("" for the person's own accounts)."""
        return "" if self.own else f"{MESSAGE_PREFIX}{self.name}"


def own_targets(holder: Holder, platforms: Sequence[str]) -> list[Target]:
    """The person's linked accounts on `platforms` (those the gateway can send to: the
    terminal is not one, it is only ever the chat in front of it)."""
    found: dict[str, Target] = {}
    for account in sorted(holder.identities):
        platform, _, ident = account.partition(":")
        if platform in platforms:
            found.setdefault(platform, Target(platform, platform, "user", ident, True))
    return list(found.values())


def named_target(name: str, spec: str) -> Target:
    """A `message.chats` entry (validated by the config) as a target."""
    match = TARGET.fullmatch(spec)
    if match is None:
        raise ValueError(f"{spec!r} is not platform:user:ID or platform:chat:ID")
    return Target(name, match.group(1), match.group(2), match.group(3), False)


def schema(own: Sequence[Target], named: Sequence[Target]) -> dict[str, Any]:
    """The tool as offered to one person: where they may send, by name."""
    places = [f'"{t.name}" (their own {t.platform} account)' for t in own]
    places += [f'"{t.name}" (a chat named by the owner, on {t.platform})' for t in named]
    return {
        "type": "function",
        "function": {
            "name": "message",
            "description": (
                "Send a message to another chat on the user's behalf, when they ask you "
                "to tell something to one of these: " + ", ".join(places) + ". Write the "
                "message itself, as it should be read there. The first message to a chat "
                "waits for the user to confirm it with a button."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "to": {"type": "string", "enum": [t.name for t in [*own, *named]]},
                    "text": {"type": "string", "description": "The message to send."},
                },
                "required": ["to", "text"],
            },
        },
    }


class Courier(Protocol):
    """The gateway's side of `message`."""

    @property
    def platforms(self) -> Sequence[str]:
        """The platforms messages can go to (configured on this home)."""

    @property
    def chats(self) -> dict[str, Target]:
        """The chats the owner named."""

    async def send(
        self, holder: Holder, surface: Surface, target: Target, text: str
    ) -> dict[str, Any]:
        """Send, or ask first: the tool's result."""


class Asker(Protocol):
    """Asks a person to confirm something with a button (a typed `/confirm` where the
    chat has none)."""

    async def consented(self, user_id: str, subject: str) -> bool:
        """Whether the person said yes to `subject` before."""

    async def ask(
        self,
        user_id: str,
        surface: Surface,
        kind: str,
        question: str,
        *,
        subject: str = "",
        payload: dict[str, Any] | None = None,
    ) -> str | None:
        """Put `question` to the person in the chat of `surface`; the code, or None when
        they could not be asked there."""


__all__ = ["Asker", "Courier", "Target", "named_target", "own_targets", "schema"]
