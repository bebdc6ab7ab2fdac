"""Access requests put to the owner and admins as a message with Approve / Deny buttons.

When a stranger asks to pair, every owner and admin reachable on a running platform gets
a direct message with the request and two buttons. A button runs the text command
`/admin approve CODE` (or `deny`) as the person who pressed it, through the command
table, so the admin guard is checked on every press exactly as for a typed command.
After a press by an admin, every copy of the request message is edited to say how it
ended (approved or denied, by whom, or expired) and loses its buttons; a press by
anyone else changes nothing and is answered with the command's refusal. A second press
(two admins at once, or a double tap) finds the request decided and shows the decision.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from datetime import datetime

from gateway.admission.people import People
from gateway.edge.events import Button, ChatRef, MessageEvent, OutboundMessage
from gateway.edge.ports import PlatformAdapter
from gateway.pipeline.delivery import Delivery
from hermes.state.models import PairingRequest, as_utc, utcnow

logger = logging.getLogger(__name__)

_DECISION = re.compile(r"^/admin\s+(approve|deny)\s+(\S+)", re.IGNORECASE)


def request_text(request: PairingRequest) -> str:
    who = request.display_name or request.platform_user_id
    return (
        f"**Access request**: {who} ({request.platform} user `{request.platform_user_id}`) "
        f"asks to talk to the assistant. Code `{request.code}`, valid for 1 hour."
    )


def buttons(code: str) -> tuple[Button, ...]:
    return (
        Button("Approve", f"/admin approve {code}", "primary"),
        Button("Deny", f"/admin deny {code}", "danger"),
    )


class Approvals:
    def __init__(
        self, people: People, delivery: Delivery, adapters: Mapping[str, PlatformAdapter]
    ) -> None:
        self.people, self.delivery, self.adapters = people, delivery, adapters
        # the request messages sent, per code: (platform, chat, message id)
        self._copies: dict[str, list[tuple[str, ChatRef, str]]] = {}

    async def ask(self, request: PairingRequest) -> int:
        """DM the request to every owner and admin on a running platform; how many."""
        message_text = request_text(request)
        asked = 0
        for identity in await self.people.db.run(self.people.repo.admin_identities):
            adapter = self.adapters.get(identity.platform)
            if adapter is None:
                continue
            try:
                chat = await adapter.direct_chat(identity.platform_user_id)
            except Exception:
                logger.exception("could not open a DM on %s", identity.platform)
                continue
            if chat is None:
                continue
            message = OutboundMessage(chat, message_text, buttons=buttons(request.code))
            result, attempts = await self.delivery.attempt(functools.partial(adapter.send, message))
            if not result.ok:
                await self.delivery.record_failure(adapter, chat, None, result, attempts)
                continue
            copies = self._copies.setdefault(request.code, [])
            copies.append((identity.platform, chat, result.message_ids[0]))
            asked += 1
        if not asked:
            logger.info("no owner or admin reachable on a running platform for a pairing request")
        return asked

    def decides(self, event: MessageEvent) -> bool:
        """Whether this press is one of ours (a pairing decision)."""
        return event.pressed and _DECISION.match(event.text.strip()) is not None

    async def settle(self, event: MessageEvent) -> None:
        """After an admin's press ran: every copy of the request shows how it ended."""
        match = _DECISION.match(event.text.strip())
        if match is None:
            return
        request = await self.people.db.run(self.people.access.pairing, match.group(2))
        if request is None:
            return
        outcome = _outcome(request, await self.people.db.run(self._name, request.decided_by))
        if outcome is None:
            return  # still open (the press did not decide it): the buttons stay
        copies = self._copies.pop(request.code, [])
        pressed = (event.platform, event.chat, event.reply_to_id or "")
        if event.reply_to_id and all(c[2] != pressed[2] for c in copies):
            copies.append(pressed)  # sent by an earlier run of the gateway
        text = f"{request_text(request)}\n\n{outcome}"
        for platform, chat, message_id in copies:
            adapter = self.adapters.get(platform)
            if adapter is None:
                continue
            message = OutboundMessage(chat, text, buttons=())
            result, _ = await self.delivery.attempt(
                functools.partial(adapter.edit, chat, message_id, message)
            )
            if not result.ok:
                logger.warning("could not update a request message: %s", result.error)

    def _name(self, user_id: str | None) -> str:
        if not user_id:
            return "someone"
        user = self.people.repo.get_user(user_id)
        return (user.display_name if user else "") or user_id


def _outcome(request: PairingRequest, by: str) -> str | None:
    """How the request ended, for its message; None while it is open."""
    when = _at(request.decided_at)
    if request.status == "approved":
        return f"✅ Approved by {by} at {when}."
    if request.status == "denied":
        return f"❌ Denied by {by} at {when}."
    if as_utc(request.expires_at) <= utcnow():
        return "⌛ Expired: nobody decided within the hour. They can ask again."
    return None


def _at(moment: datetime | None) -> str:
    return as_utc(moment).strftime("%H:%M UTC") if moment else "an unknown time"


__all__ = ["Approvals", "buttons", "request_text"]
