"""A resolved model endpoint: what the client needs, with the key already read."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Endpoint:
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)  # never printed
    timeout: float = 60.0
    max_retries: int = 3
    temperature: float = 0.7
    # one call from start to finish, retries and a streamed reply included: a stream
    # that trickles a piece a second never meets `timeout` (that is per read)
    deadline: float = 300.0
