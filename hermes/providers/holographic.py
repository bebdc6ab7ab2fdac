"""`holographic`: a local fact store beside the built-in memory (no model, no network).

Facts have a category, the entities found in them by rules (names, product and version
words, quoted text, short CJK runs), and a trust score moved by feedback and by
contradictions. A question's candidates come from the person's FTS5 index (words and
CJK terms) and from facts sharing its entities; they are ranked by keyword overlap,
Jaccard similarity, trust and a holographic reduced representation (HRR): each fact is
the sum of its words and of each entity bound to each word by circular convolution, so
"what does Mina like" meets "Mina likes hiking" through the bound pair (mina, like)
rather than through either word alone. Every add, replace and remove of the built-in
stores is mirrored (as facts of category `memory` or `user`); undo, merges and
consolidations re-sync the mirrored facts with the store.

Tools: `fact_store` (add, search, probe an entity, related, contradict, update, remove,
list) and `fact_feedback`. Storage: hermes/state/factstore.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hermes.memory.entries import parse
from hermes.providers.base import BaseProvider
from hermes.state.cjk import CJK_CLASS, index_terms, runs
from hermes.state.factstore import Fact, FactStore
from hermes.state.search import STOPWORDS

logger = logging.getLogger(__name__)

HRR_DIM = 256  # enough for the dozen bound pairs of a short fact
PREFETCH_FACTS = 5
CANDIDATES = 50  # per source (the word index, the entities), before ranking
MIN_TRUST = 0.25  # below this a fact is not recalled (searched still): a contradicted one
FEEDBACK_STEP, CONTRADICTED_STEP = 0.1, 0.3
WEIGHTS = {"overlap": 0.35, "jaccard": 0.2, "hrr": 0.25, "trust": 0.2}  # set, not fitted

_WORD = re.compile(r"[^\W\d_]{2,}|\d+(?:[.:]\d+)*", re.UNICODE)
_NAME = re.compile(
    r"\b(?:[A-Z][\w'-]*[a-z0-9][\w-]*)(?:\s+[A-Z][\w-]*)*|\b\w*[a-z][A-Z0-9]\w*|\b\w+-\d[\w.]*"
)
_QUOTED = re.compile(r"[\"“”']([^\"“”']{2,40})[\"“”']")
_HANDLE = re.compile(r"@\w{2,}")
_CJK_CHARS = re.compile(f"[{CJK_CLASS}]+")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "fact_store",
            "description": (
                "Your long-term fact store about this user, beside your memory: add durable "
                "facts, search them, probe everything about an entity (a person, a project, "
                "a product), find related entities, record that a new fact contradicts an "
                "old one, update, remove or list facts."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {
                        "type": "string",
                        "enum": [
                            "add",
                            "search",
                            "probe",
                            "related",
                            "contradict",
                            "update",
                            "remove",
                            "list",
                        ],
                    },
                    "content": {
                        "type": "string",
                        "description": "The fact (add, update, contradict).",
                    },
                    "query": {"type": "string", "description": "What to look for (search)."},
                    "entity": {"type": "string", "description": "A name (probe, related)."},
                    "fact_id": {"type": "integer"},
                    "category": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                },
                "required": ["action"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "fact_feedback",
            "description": "Say whether a recalled fact was right and useful (moves its trust).",
            "parameters": {
                "type": "object",
                "properties": {"fact_id": {"type": "integer"}, "helpful": {"type": "boolean"}},
                "required": ["fact_id", "helpful"],
                "additionalProperties": False,
            },
        },
    },
]


def words(text: str) -> list[str]:
    """Content words (casefolded, stopwords out) and the CJK terms of `text`."""
    normal = unicodedata.normalize("NFKC", text).casefold()
    stems = (_stem(w) for w in _WORD.findall(_CJK_CHARS.sub(" ", normal)))
    latin = [w for w in stems if w not in STOPWORDS]
    return latin + index_terms(text).split()


def _stem(word: str) -> str:
    """A light English stem (works/worked/working -> work), the same for facts and
    questions; other languages pass unchanged."""
    if not word.isascii() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def entities(text: str) -> list[str]:
    """Names by rules: capitalized words and phrases, mixed-case or versioned product
    words (PostgreSQL, k8s, gpt-4), quoted text, @handles, and short CJK runs."""
    found = [m.group(0) for m in _NAME.finditer(text)]
    found += [m.group(1) for m in _QUOTED.finditer(text)]
    found += _HANDLE.findall(text)
    found += [run for run in runs(text) if 2 <= len(run) <= 4]
    names = []
    for name in found:
        folded = name.strip().casefold()
        if folded and folded not in STOPWORDS and len(folded) > 1:
            names.append(folded)
    return list(dict.fromkeys(names))


@lru_cache(maxsize=50_000)
def _spectrum(token: str) -> NDArray[np.complex128]:
    """The Fourier transform of the token's random unit vector (seeded by its hash)."""
    seed = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "big")
    vector = np.random.default_rng(seed).standard_normal(HRR_DIM)
    return np.fft.rfft(vector / np.linalg.norm(vector))


# rfft keeps half the spectrum: each bin but the first and last stands for two
_PARSEVAL = np.full(HRR_DIM // 2 + 1, 2.0)
_PARSEVAL[0] = _PARSEVAL[-1] = 1.0


def hrr(names: list[str], terms: list[str]) -> NDArray[np.complex128]:
    """The holographic representation, as its spectrum: the terms, plus each entity
    bound to each term by circular convolution. Binding is bilinear, so the sum over
    every (entity, term) pair is the binding of the two sums: one product of spectra."""
    plain = [t for t in dict.fromkeys(terms) if t not in names]
    if not plain:
        return np.zeros(HRR_DIM // 2 + 1, dtype=np.complex128)
    term_sum: NDArray[np.complex128] = np.sum([_spectrum(t) for t in plain], axis=0)
    if not names:
        return term_sum
    name_sum: NDArray[np.complex128] = np.sum([_spectrum(n) for n in dict.fromkeys(names)], axis=0)
    return term_sum + name_sum * term_sum


def similarity(a: NDArray[np.complex128], b: NDArray[np.complex128]) -> float:
    """The cosine of the two vectors, computed on their spectra (Parseval)."""
    dot = float(np.sum(_PARSEVAL * (a.conj() * b).real))
    norms = float(np.sum(_PARSEVAL * np.abs(a) ** 2) * np.sum(_PARSEVAL * np.abs(b) ** 2))
    return dot / norms**0.5 if norms > 0 else 0.0


class HolographicProvider(BaseProvider):
    name = "holographic"
    needs = ()

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self._store: FactStore | None = None

    def initialize(self, session_id: str, **kw: Any) -> None:
        super().initialize(session_id, **kw)
        self._store = FactStore.at(Path(kw["hermes_home"]))

    @property
    def store(self) -> FactStore:
        if self._store is None or not self.user_id:
            raise RuntimeError("the holographic provider is used before initialize")
        return self._store

    def system_prompt_block(self) -> str:
        return (
            "## Fact store\nBeside your memory you have a fact store about this user "
            "(`fact_store`: add, search, probe, related, contradict, update, remove, list; "
            "`fact_feedback` after using a recalled fact). Recalled facts show their id and "
            "trust; prefer facts with higher trust, and say when one contradicts another."
        )

    async def prefetch(self, query: str, *, session_id: str) -> str:
        found = [f for f in self.search(query, PREFETCH_FACTS * 2) if f.trust >= MIN_TRUST]
        return "\n".join(_line(f) for f in found[:PREFETCH_FACTS])

    def on_memory_write(
        self, action: str, target: str, content: str, *, metadata: dict[str, Any]
    ) -> None:
        source = f"builtin:{target}"
        before = metadata.get("before")
        if action == "add":
            self._add(content, category=target, source=source)
        elif action == "replace":
            old = self.store.find(self.user_id, str(before), source) if before else None
            if old is not None and self.store.find(self.user_id, content) is None:
                self.store.update(self.user_id, old.id, content, entities(content), _body(content))
            else:
                self._add(content, category=target, source=source)
        elif action == "remove":
            old = self.store.find(self.user_id, str(before), source) if before else None
            if old is not None:
                self.store.remove(self.user_id, [old.id])
        else:  # undo, merge, consolidate: the whole store text; mirror it as it now is
            wanted = parse(content)
            mirrored = self.store.facts(self.user_id, source=source)
            stale = [f.id for f in mirrored if f.content not in wanted]
            self.store.remove(self.user_id, stale)
            have = {f.content for f in mirrored}
            for entry in wanted:
                if entry not in have:
                    self._add(entry, category=target, source=source)

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return TOOLS

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        try:
            if name == "fact_feedback":
                result = self._feedback(args)
            elif name == "fact_store":
                result = self._fact_store(args)
            else:
                result = {"success": False, "error": f"unknown tool {name}"}
        except (TypeError, ValueError) as exc:
            result = {"success": False, "error": str(exc)}
        return json.dumps(result, ensure_ascii=False)

    def backup_paths(self) -> list[Path]:
        return []  # holographic.db lives in HERMES_HOME: the backup has it already

    def merge_people(self, keep: str, gone: str, hermes_home: Path) -> None:
        if FactStore.exists(hermes_home):
            moved = FactStore.at(hermes_home).merge_people(keep, gone)
            logger.info("holographic: %d facts of %s are now %s's", moved, gone, keep)

    # -- the store's operations ----------------------------------------------------------

    def search(self, query: str, limit: int = 10) -> list[Fact]:
        terms = words(query)
        names = entities(query)
        ids = set(self.store.candidates(self.user_id, terms, CANDIDATES)) | set(
            self.store.with_entity(self.user_id, names, CANDIDATES)
        )
        facts = self.store.facts(self.user_id, ids)
        if not facts:
            return []
        asked = set(terms) | set(names)
        question = hrr(names, terms)
        scored = []
        for fact in facts:
            terms_of = fact.body.split()  # words(content), stored with the fact
            have = set(terms_of) | set(fact.entities)
            overlap = len(asked & have) / len(asked) if asked else 0.0
            jaccard = len(asked & have) / len(asked | have) if asked | have else 0.0
            bound = similarity(question, hrr(list(fact.entities), terms_of))
            score = (
                WEIGHTS["overlap"] * overlap
                + WEIGHTS["jaccard"] * jaccard
                + WEIGHTS["hrr"] * max(bound, 0.0)
                + WEIGHTS["trust"] * fact.trust
            )
            scored.append((score, fact))
        scored.sort(key=lambda pair: (-pair[0], -pair[1].id))
        return [fact for _, fact in scored[:limit]]

    def _add(self, content: str, *, category: str, source: str, trust: float = 0.5) -> int:
        text = " ".join(content.split())
        if not text:
            raise ValueError("a fact needs content")
        return self.store.add(
            self.user_id,
            text,
            category=category or "general",
            source=source,
            entities=entities(text),
            body=_body(text),
            trust=trust,
        )

    def _fact_store(self, args: dict[str, Any]) -> dict[str, Any]:
        action = str(args.get("action", ""))
        handler = {
            "add": self._tool_add,
            "search": lambda a: _listing(self.search(str(a.get("query", "")), _limit(a))),
            "probe": self._probe,
            "related": lambda a: self._related(str(a.get("entity", "")).casefold(), _limit(a)),
            "contradict": lambda a: self._contradict(_id(a), str(a.get("content", ""))),
            "update": self._update,
            "remove": self._remove,
            "list": self._list,
        }.get(action)
        if handler is None:
            return {"success": False, "error": f"unknown action {action!r}"}
        return handler(args)

    def _tool_add(self, args: dict[str, Any]) -> dict[str, Any]:
        category = str(args.get("category") or "general")
        fact_id = self._add(str(args.get("content", "")), category=category, source="tool")
        return {"success": True, "fact_id": fact_id}

    def _probe(self, args: dict[str, Any]) -> dict[str, Any]:
        name = str(args.get("entity", "")).casefold()
        ids = self.store.with_entity(self.user_id, [name])
        return _listing(self.store.facts(self.user_id, ids)[: _limit(args)])

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        content = " ".join(str(args.get("content", "")).split())
        if not content:
            raise ValueError("a fact needs content")
        done = self.store.update(
            self.user_id, _id(args), content, entities(content), _body(content)
        )
        return {"success": True} if done else {"success": False, "error": "no such fact"}

    def _remove(self, args: dict[str, Any]) -> dict[str, Any]:
        done = self.store.remove(self.user_id, [_id(args)]) == 1
        return {"success": True} if done else {"success": False, "error": "no such fact"}

    def _list(self, args: dict[str, Any]) -> dict[str, Any]:
        category = args.get("category")
        facts = [
            f for f in self.store.facts(self.user_id) if not category or f.category == category
        ]
        return _listing(facts[-_limit(args) :])

    def _related(self, name: str, limit: int) -> dict[str, Any]:
        facts = self.store.facts(self.user_id, self.store.with_entity(self.user_id, [name]))
        counts: dict[str, int] = {}
        for fact in facts:
            for other in fact.entities:
                if other != name:
                    counts[other] = counts.get(other, 0) + 1
        related = sorted(counts, key=lambda n: (-counts[n], n))[:limit]
        return {"success": True, "entity": name, "related": related, "via": [f.id for f in facts]}

    def _contradict(self, fact_id: int, content: str) -> dict[str, Any]:
        old = self.store.facts(self.user_id, [fact_id])
        if not old:
            return {"success": False, "error": "no such fact"}
        trust = self.store.adjust_trust(self.user_id, fact_id, -CONTRADICTED_STEP, None)
        new_id = self._add(content, category=old[0].category, source="tool")
        return {"success": True, "fact_id": new_id, "contradicted": fact_id, "old_trust": trust}

    def _feedback(self, args: dict[str, Any]) -> dict[str, Any]:
        helpful = args.get("helpful")
        if not isinstance(helpful, bool):
            raise ValueError("'helpful' must be true or false")
        step = FEEDBACK_STEP if helpful else -FEEDBACK_STEP
        trust = self.store.adjust_trust(self.user_id, _id(args), step, helpful)
        if trust is None:
            return {"success": False, "error": "no such fact"}
        return {"success": True, "trust": round(trust, 2)}


def _limit(args: dict[str, Any]) -> int:
    value = args.get("limit") or 10
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("'limit' must be an integer")
    return max(1, min(value, 50))


def _id(args: dict[str, Any]) -> int:
    value = args.get("fact_id")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("'fact_id' must be an integer")
    return value


def _body(text: str) -> str:
    """What the word index holds for a fact (its entities are in their own table)."""
    return " ".join(words(text))


def _line(fact: Fact) -> str:
    return f"- {fact.content} [{fact.category}, trust {fact.trust:.1f}, fact #{fact.id}]"


def _listing(facts: list[Fact]) -> dict[str, Any]:
    return {
        "success": True,
        "count": len(facts),
        "facts": [
            {
                "fact_id": f.id,
                "content": f.content,
                "category": f.category,
                "trust": round(f.trust, 2),
                "entities": list(f.entities),
            }
            for f in facts
        ],
    }


__all__ = ["HolographicProvider", "entities", "hrr", "words"]
