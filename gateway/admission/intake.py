"""Intake: what happens to every platform event before it may wait in any queue.

The steps, in this order (each one may end the event's way here):

1. drop the bot's own messages and other bots' (adapters mark them `is_bot`);
2. drop redeliveries (the same delivery id or message id seen before; with several
   gateways on one database, by any of them: gateway/pipeline/shared.py records the
   ids there with the event's queue row, or before acting on one that has none);
3. drop what is not addressed to the assistant (in groups: a mention, a reply to the
   bot, a command, or a chat configured to be answered without one);
4. admit the person (gateway/admission/people.py): allowed -> on; a stranger's DM -> a pairing
   reply (rate limited) and nothing else, unless the message is a command open to
   strangers (`/link CODE`); everyone else -> silence;
5. the person's rate: a burst, then so many events a minute, messages, commands and
   button presses alike (a forged flood of presses is a flood like any other); past it
   an event is dropped, with one notice a minute;
6. decide the session key, once: it travels with the event down to storage.

Only an event that passed all six becomes `Admitted`; everything after (the no-text
note, commands, the lanes, merged batches) sees admitted events only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gateway.admission.people import People, Person, Verdict
from gateway.admission.session_key import Scope, SessionKey, session_key
from gateway.edge.events import MessageEvent
from hermes.buckets import Buckets, Taken
from hermes.places import ChatType


@dataclass(frozen=True, slots=True)
class IntakePolicy:
    group_scope: Scope = Scope.PER_USER
    scopes: Mapping[str, Scope] = field(default_factory=dict)  # per platform, overrides
    always_answer_chats: frozenset[str] = frozenset()  # groups answered without a mention
    remembered_deliveries: int = 10_000
    per_person_burst: int = 30
    per_person_per_minute: float = 60.0


@dataclass(frozen=True, slots=True)
class Admitted:
    """An event that passed intake, with its person and session key decided."""

    event: MessageEvent
    person: Person
    key: SessionKey
    # several gateways: its row in the database's inbox (gateway/pipeline/shared.py), and
    # whether an instance had taken it and died before its turn ended
    row: int | None = None
    interrupted: bool = False


SLOW_DOWN = (
    "You're sending faster than I can keep up with, so I skipped some of it. Give me a moment."
)


class Intake:
    def __init__(
        self,
        people: People,
        policy: IntakePolicy,
        *,
        open_to_strangers: Callable[[str], bool],
        reply: Callable[[MessageEvent, str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.people, self.policy = people, policy
        self._open_to_strangers = open_to_strangers  # from the command table
        self._reply = reply  # sends a reply beside the lanes (pairing codes)
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._budgets = Buckets(
            policy.per_person_per_minute,
            policy.per_person_burst,
            remembered=policy.remembered_deliveries,
            clock=clock,
        )
        # several gateways on one database: records the event's ids there before a
        # pairing reply, False when another instance (or an earlier delivery) had them
        # (gateway/pipeline/shared.py; a queued event's ids are recorded with its row)
        self.first_sighting: Callable[[MessageEvent], bool] | None = None

    async def admit(self, event: MessageEvent) -> Admitted | None:
        """The event's person and key, or None when it is dropped (a bot, a redelivery,
        not addressed to the bot, a stranger, over the rate). Who the person is comes
        from the database executor: the loop never waits for it."""
        if event.user.is_bot or self._duplicate(event) or not self._addressed(event):  # 1-3
            return None
        person = await self.people.aresolve(event)  # 4
        if not person.admitted:
            if person.verdict is not Verdict.PAIR or event.pressed:
                return None  # (a stranger pressing a button: nothing to say)
            if not self._open_to_strangers(event.text):
                sighting = self.first_sighting
                if sighting is not None and not await self.people.db.run(sighting, event):
                    return None  # another instance answered this delivery already
                reply = await self.people.apairing_reply(event)
                if reply is not None:
                    self._reply(event, reply)
                return None
            person = await self.people.aresolve(event, create=True)  # /link CODE needs one
        if not self._within_rate(person.user_id, event):  # 5
            return None
        scope = self.policy.scopes.get(event.platform, self.policy.group_scope)
        return Admitted(event, person, session_key(event, scope))  # 6

    async def readmit(self, event: MessageEvent) -> Admitted | None:
        """An event another gateway process admitted, to be worked here: its person is
        resolved again (a block made since holds) and its key decided; it was deduped
        and rate-counted where it arrived."""
        person = await self.people.aresolve(event)
        if not person.admitted:
            if person.verdict is not Verdict.PAIR or not self._open_to_strangers(event.text):
                return None
            person = await self.people.aresolve(event, create=True)
        scope = self.policy.scopes.get(event.platform, self.policy.group_scope)
        return Admitted(event, person, session_key(event, scope))

    def _within_rate(self, user_id: str, event: MessageEvent) -> bool:
        """Per person: `per_person_burst` events at once, `per_person_per_minute` after."""
        taken = self._budgets.take(user_id)
        if taken is Taken.NO_SAY_SO:
            self._reply(event, SLOW_DOWN)
        return taken is Taken.YES

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
