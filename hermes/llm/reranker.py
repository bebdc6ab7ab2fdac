"""A second look at the best search candidates, by the search side task's model.

Hybrid search fuses a word ranking and a vector ranking, each weighed by how sure it is
of itself; where both are sure of different messages, no weighing tells which is right
(docs/benchmarks.md: on the largest haystack no choice between the two lists reaches
what either finds alone). With `search.rerank.enabled`, the best `candidates` messages of
the fused list (the union of what both sides ranked high) are shown to the model with
the question, and it puts them in order. Off by default: it is one model call per
search, and its gain could not be measured here (no model behind the benchmarks).
"""

from __future__ import annotations

import re

from hermes.llm.client import LLMClient

INSTRUCTIONS = (
    "You rank messages from a user's past conversations by how well each answers a "
    "search query. Reply with the numbers of the messages, most relevant first, separated "
    "by commas, and nothing else. Leave out messages that are not relevant at all."
)
CANDIDATE_CHARS = 300  # of each message shown: enough to tell what it is about
_NUMBER = re.compile(r"\d+")


class LLMReranker:
    def __init__(self, client: LLMClient, max_tokens: int = 120) -> None:
        self.client = client
        self.max_tokens = max_tokens

    async def rank(self, query: str, candidates: list[str]) -> list[int]:
        """The candidates' indexes in the model's order: the ones it named first (each
        once, unknown numbers ignored), then the ones it left out, as they came."""
        listed = "\n".join(
            f"{n}. {' '.join(text.split())[:CANDIDATE_CHARS]}"
            for n, text in enumerate(candidates, 1)
        )
        messages = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": f"Search query: {query}\n\nMessages:\n{listed}"},
        ]
        answer = await self.client.text(messages, max_tokens=self.max_tokens)
        named = [int(n) - 1 for n in _NUMBER.findall(answer)]
        order = list(dict.fromkeys(i for i in named if 0 <= i < len(candidates)))
        chosen = set(order)
        return order + [i for i in range(len(candidates)) if i not in chosen]
