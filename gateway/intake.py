"""Intake: what happens to every platform event before it may wait in any queue.

The steps, in this order (each one may end the event's way here):

1. drop the bot's own messages and other bots' (adapters mark them `is_bot`);
2. drop redeliveries (the same delivery id or message id seen before);
3. drop what is not addressed to the assistant (in groups: a mention, a reply to the
   bot, a command, or a chat configured to be answered without one);
4. admit the person (gateway/people.py): allowed -> on; a stranger's DM -> a pairing
   reply (rate limited) and nothing else, unless the message is a command open to
   strangers (`/link CODE`); everyone else -> silence;
5. decide the session key, once: it travels with the event down to storage.

Only an event that passed all five becomes `Admitted`; everything after (the no-text
note, commands, the lanes, merged batches) sees admitted events only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.events import ChatType, MessageEvent
from gateway.people import People, Person, Verdict
from gateway.session_key import Scope, SessionKey, session_key


@dataclass(frozen=True, slots=True)
class IntakePolicy:
    group_scope: Scope = Scope.PER_USER
    scopes: Mapping[str, Scope] = field(default_factory=dict)  # per platform, overrides
    always_answer_chats: frozenset[str] = frozenset()  # groups answered without a mention
    remembered_deliveries: int = 10_000


@dataclass(frozen=True, slots=True)
class Admitted:
    """An event that passed intake, with its person and session key decided."""

    event: MessageEvent
    person: Person
    key: SessionKey


class Intake:
    def __init__(
        self,
        people: People,
        policy: IntakePolicy,
        *,
        open_to_strangers: Callable[[str], bool],
        reply: Callable[[MessageEvent, str], None],
    ) -> None:
        self.people, self.policy = people, policy
        self._open_to_strangers = open_to_strangers  # from the command table
        self._reply = reply  # sends a reply beside the lanes (pairing codes)
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def admit(self, event: MessageEvent) -> Admitted | None:
        if event.user.is_bot:  # 1
            return None
        if self._duplicate(event):  # 2
            return None
        if not self._addressed(event):  # 3
            return None
        person = self.people.resolve(event)  # 4
        if not person.admitted:
            if person.verdict is not Verdict.PAIR or event.pressed:
                return None  # (a stranger pressing a button: nothing to say)
            if not self._open_to_strangers(event.text):
                reply = self.people.pairing_reply(event)
                if reply is not None:
                    self._reply(event, reply)
                return None
            person = self.people.resolve(event, create=True)  # /link CODE needs a user
        scope = self.policy.scopes.get(event.platform, self.policy.group_scope)
        return Admitted(event, person, session_key(event, scope))  # 5

    def _duplicate(self, event: MessageEvent) -> bool:
        keys = [(event.platform, f"e:{event.event_id}"), (event.platform, f"m:{event.message_id}")]
        if any(k in self._seen for k in keys):
            return True
        for k in keys:
            self._seen[k] = None
        while len(self._seen) > self.policy.remembered_deliveries:
            self._seen.popitem(last=False)
        return False

    def _addressed(self, event: MessageEvent) -> bool:
        if event.chat.type is ChatType.DM or event.addressed:
            return True
        return event.text.startswith("/") or event.chat.id in self.policy.always_answer_chats


__all__ = ["Admitted", "Intake", "IntakePolicy"]
