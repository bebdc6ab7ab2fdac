"""What a command handler receives: the person, where they wrote, the session."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.admission.people import Person
from gateway.edge.events import MessageEvent
from hermes.places import Surface

if TYPE_CHECKING:
    from gateway.admission.intake import Admitted


class RuntimeInfo(Protocol):
    """What the running process knows about itself, for `/admin status`."""

    def uptime_s(self) -> float | None: ...

    def adapter_states(self) -> dict[str, str]: ...

    async def llm_health(self) -> str: ...

    def dashboard_url(self) -> str | None:
        """Where this home's web dashboard is served now (None: nowhere)."""
        ...


@dataclass(frozen=True, slots=True)
class CommandContext:
    person: Person
    surface: Surface
    session_id: str | None = None  # the conversation the command was sent in
    admitted: Admitted | None = None  # the event as intake admitted it (lanes need it)

    @property
    def private(self) -> bool:
        return self.surface.chat_type == "dm"


class SessionControl(Protocol):
    """What /new and /stop act on: the router's lanes."""

    async def reset(self, ctx: CommandContext) -> None: ...

    async def stop_turn(self, ctx: CommandContext) -> bool: ...


class Answers(Protocol):
    """What `/confirm` answers: a question put with buttons (gateway/pipeline/confirmations.py)."""

    async def answer(self, user_id: str, argument: str, event: MessageEvent | None) -> str:
        """`event`: the message or button press the command came in."""
        ...


Handler = Callable[[CommandContext, str], Awaitable[str]]
