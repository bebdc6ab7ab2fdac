"""Ranked message search over state.db, always confined to one user.

Natural-language queries are turned into safe FTS5 expressions (never a syntax error):
stopwords dropped, every term quoted, balanced quoted phrases kept, FTS syntax and
dangling operators stripped, dotted/hyphenated terms quoted whole. Terms in Korean,
Chinese or Japanese go to the trigram index (3+ characters) or a LIKE scan over the
user's own messages (1-2 characters). The ranked lists are merged by reciprocal rank
fusion, so scores from different indexes never need to be comparable.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from typing import Any

from sqlalchemy import Connection, text

RRF_K = 60
CANDIDATES = 200  # per index, before fusion
BM25_K1, BM25_B = 1.2, 0.3
NEIGHBOUR_WEIGHT = 0.4
NEIGHBOUR2_WEIGHT = 0.3
SESSION_WEIGHT = 0.2

STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
    i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
    myself no nor not of off on once only or other ought our ours ourselves out over own same
    shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've were weren't
    what what's when when's where where's which while who who's whom why why's with won't would
    wouldn't you you'd you'll you're you've your yours yourself yourselves also just did ever
    anything something thing things tell told talk talked say said remember recall like likely
    would might may much many get got know let us one near""".split()
)
OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})
KOREAN_PARTICLES = (
    "에서는",
    "에게서",
    "으로는",
    "한테서",
    "에서",
    "에게",
    "한테",
    "께서",
    "까지",
    "부터",
    "으로",
    "은",
    "는",
    "이",
    "가",
    "을",
    "를",
    "에",
    "의",
    "도",
    "로",
    "와",
    "과",
    "만",
)
_PHRASE = re.compile(r'"([^"]+)"')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SEPARATORS = re.compile(r'["(){}\[\]^*+,;!?<>=|~`]')
_EDGE = re.compile(r"^[^\w]+|[^\w]+$")
_WORDCHARS = re.compile(r"\w+")


def is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x1100 <= code <= 0x11FF  # Hangul jamo
        or 0x3040 <= code <= 0x30FF  # Hiragana, Katakana
        or 0x3130 <= code <= 0x318F  # Hangul compatibility jamo
        or 0x3400 <= code <= 0x4DBF  # CJK extension A
        or 0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0x20000 <= code <= 0x2FA1F  # CJK extensions B-F and supplement
    )


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    words: tuple[str, ...] = ()  # terms and phrases for the word index (unquoted)
    cjk: tuple[str, ...] = ()  # CJK substrings

    @property
    def empty(self) -> bool:
        return not self.words and not self.cjk

    @property
    def terms(self) -> tuple[str, ...]:
        """Everything a snippet may highlight."""
        return self.words + self.cjk


@dataclass(frozen=True, slots=True)
class SearchScope:
    user_id: str
    chat_id: str | None = None  # set in group chats: only that chat's sessions
    platform: str | None = None
    role: str | None = None
    exclude_session_id: str | None = None


@dataclass(frozen=True, slots=True)
class MessageHit:
    message_id: int
    session_id: str
    role: str
    content: str
    created_at: datetime
    score: float  # higher is better
    terms: tuple[str, ...] = field(default=(), compare=False)


def parse_query(raw: str) -> ParsedQuery:
    text_ = _CONTROL.sub(" ", unicodedata.normalize("NFKC", raw))
    phrases = [" ".join(p.split()) for p in _PHRASE.findall(text_) if _WORDCHARS.search(p)]
    rest = _SEPARATORS.sub(" ", _PHRASE.sub(" ", text_))
    tokens = [t for t in (_EDGE.sub("", tok) for tok in rest.split()) if t and t not in OPERATORS]
    meaningful = [t for t in tokens if t.casefold() not in STOPWORDS]
    words: list[str] = []
    cjk: list[str] = []
    for phrase in phrases:
        _route(phrase, words, cjk, whole=True)
    for token in meaningful or tokens:  # a query of only stopwords keeps them
        _route(token, words, cjk, whole=False)
    return ParsedQuery(tuple(dict.fromkeys(words)), tuple(dict.fromkeys(cjk)))


def _route(item: str, words: list[str], cjk: list[str], whole: bool) -> None:
    """Send CJK runs of `item` to substring search and the rest to the word index."""
    runs = [(key, "".join(chars)) for key, chars in groupby(item, key=is_cjk)]
    if not any(key for key, _ in runs):
        words.append(item)
        return
    after_latin = False
    for key, run in runs:
        if not key:
            piece = _EDGE.sub("", run)
            if _WORDCHARS.search(piece) and (whole or piece.casefold() not in STOPWORDS):
                words.append(piece)
            after_latin = bool(piece)
        elif not (after_latin and run in KOREAN_PARTICLES):  # "API를": drop the particle
            cjk.append(_strip_particle(run))


def _strip_particle(word: str) -> str:
    for particle in KOREAN_PARTICLES:
        if word.endswith(particle) and len(word) - len(particle) >= 2:
            return word[: -len(particle)]
    return word


def quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_expression(words: tuple[str, ...]) -> str:
    return " OR ".join(quote(w) for w in words)


def scope_token(user_id: str) -> str:
    return "s" + user_id[2:]


def search_messages(conn: Connection, scope: SearchScope, raw: str, limit: int) -> list[MessageHit]:
    """The user's best-matching messages, best first (at most `limit`)."""
    parsed = parse_query(raw)
    if parsed.empty:
        return []
    ranked: list[list[MessageHit]] = []
    if parsed.words:
        ranked.append(_word_hits(conn, scope, parsed))
    long_cjk = tuple(t for t in parsed.cjk if len(t) >= 3)
    short_cjk = tuple(t for t in parsed.cjk if len(t) < 3)
    if long_cjk:
        ranked.append(_trigram_hits(conn, scope, long_cjk, parsed))
    if short_cjk:
        ranked.append(_like_hits(conn, scope, short_cjk, parsed))
    return fuse(ranked)[:limit]


def fuse(ranked: list[list[MessageHit]]) -> list[MessageHit]:
    if len(ranked) == 1:
        return ranked[0]
    scores: dict[int, float] = {}
    first: dict[int, MessageHit] = {}
    for hits in ranked:
        for rank, hit in enumerate(hits):
            scores[hit.message_id] = scores.get(hit.message_id, 0.0) + 1.0 / (RRF_K + rank + 1)
            first.setdefault(hit.message_id, hit)
    order = sorted(scores, key=lambda mid: (-scores[mid], -mid))
    return [_rescored(first[mid], scores[mid]) for mid in order]


def _rescored(hit: MessageHit, score: float) -> MessageHit:
    return MessageHit(
        hit.message_id, hit.session_id, hit.role, hit.content, hit.created_at, score, hit.terms
    )


_SELECT = (
    "SELECT m.id, m.session_id, m.role, m.content, m.created_at, {score} AS score "
    "FROM {source} JOIN messages m ON m.id = {rowid} JOIN sessions s ON s.id = m.session_id "
    "WHERE m.user_id = :uid {filters} ORDER BY score DESC, m.id DESC LIMIT :n"
)


def _filters(scope: SearchScope) -> tuple[str, dict[str, Any]]:
    clauses, params = [], {"uid": scope.user_id, "n": CANDIDATES}
    for column, value, name in (
        ("s.chat_id", scope.chat_id, "chat"),
        ("s.platform", scope.platform, "platform"),
        ("m.role", scope.role, "role"),
    ):
        if value is not None:
            clauses.append(f"AND {column} = :{name}")
            params[name] = value
    if scope.exclude_session_id:
        clauses.append("AND m.session_id <> :exclude")
        params["exclude"] = scope.exclude_session_id
    return " ".join(clauses), params


def _run(
    conn: Connection, sql: str, params: dict[str, Any], terms: tuple[str, ...]
) -> list[MessageHit]:
    rows = conn.execute(text(sql), params).all()
    return [
        MessageHit(r[0], r[1], r[2], r[3], _as_datetime(r[4]), float(r[5]), terms) for r in rows
    ]


def _word_hits(conn: Connection, scope: SearchScope, parsed: ParsedQuery) -> list[MessageHit]:
    """BM25 over this user's own messages, then context-aware reranking.

    FTS5's built-in bm25() takes its statistics from every user's messages, so a word
    that is rare overall but common for this person (their own name, their project)
    would outweigh the words that matter; it is also the costly part of a query. Here
    each term's postings are read once, confined to the user by the scope token, and
    IDF comes from the user's messages alone. Term frequency is taken as 1 (chat
    messages are short). The best candidates are then loaded, length-normalized and
    smoothed with their neighbouring turns and their session's coverage of the query.
    """
    token = scope_token(scope.user_id)
    total = _count(conn, f"scope : {token}")
    weights: dict[int, float] = {}
    idf_of: dict[str, float] = {}
    postings: dict[str, list[int]] = {}
    for word in parsed.words:
        rows = conn.execute(text(_POSTINGS), {"q": f"scope : {token} AND {quote(word)}"})
        postings[word] = [row[0] for row in rows]
        n = len(postings[word])
        idf_of[word] = math.log(1 + (total - n + 0.5) / (n + 0.5))
        for rowid in postings[word]:
            weights[rowid] = weights.get(rowid, 0.0) + idf_of[word]
    order = sorted(weights, key=lambda rowid: (-weights[rowid], -rowid))
    candidates = _load(conn, scope, order, parsed.terms)
    if len(candidates) < 2:
        return candidates
    return _rerank(conn, candidates, weights, postings, idf_of)


_POSTINGS = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q"


def _load(
    conn: Connection, scope: SearchScope, order: list[int], terms: tuple[str, ...]
) -> list[MessageHit]:
    """The first CANDIDATES messages of `order` that pass the scope's filters."""
    filters, params = _filters(scope)
    params.pop("n")
    found: dict[int, MessageHit] = {}
    for start in range(0, len(order), CANDIDATES):
        page = order[start : start + CANDIDATES]
        sql = (
            "SELECT m.id, m.session_id, m.role, m.content, m.created_at, 0.0 FROM messages m "
            "JOIN sessions s ON s.id = m.session_id WHERE m.user_id = :uid "
            f"AND m.id IN ({','.join(str(i) for i in page)}) {filters}"
        )
        for hit in _run(conn, sql, params, terms):
            found[hit.message_id] = hit
        if len(found) >= CANDIDATES:
            break
    return [found[i] for i in order if i in found][:CANDIDATES]


def _rerank(
    conn: Connection,
    candidates: list[MessageHit],
    weights: dict[int, float],
    postings: dict[str, list[int]],
    idf_of: dict[str, float],
) -> list[MessageHit]:
    lengths = {hit.message_id: max(1, len(hit.content.split())) for hit in candidates}
    average = sum(lengths.values()) / len(lengths)
    base = {
        mid: weights[mid]
        * (BM25_K1 + 1)
        / (1 + BM25_K1 * (1 - BM25_B + BM25_B * lengths[mid] / average))
        for mid in lengths
    }
    session_of = {hit.message_id: hit.session_id for hit in candidates}
    covered: dict[str, dict[str, float]] = {}
    for word, rowids in postings.items():
        for rowid in rowids:
            if rowid in session_of:
                covered.setdefault(session_of[rowid], {})[word] = idf_of[word]
    id_list = ",".join(str(mid) for mid in lengths)
    neighbours = conn.execute(text(_NEIGHBOURS.format(ids=id_list))).all()
    final = {
        mid: base[mid]
        + NEIGHBOUR_WEIGHT * (base.get(p1 or 0, 0.0) + base.get(n1 or 0, 0.0))
        + NEIGHBOUR2_WEIGHT * (base.get(p2 or 0, 0.0) + base.get(n2 or 0, 0.0))
        + SESSION_WEIGHT * sum(covered.get(session_of[mid], {}).values())
        for mid, p1, n1, p2, n2 in neighbours
    }
    ranked = sorted(candidates, key=lambda h: (-final[h.message_id], -h.message_id))
    return [_rescored(hit, final[hit.message_id]) for hit in ranked]


_NEAR = (
    "(SELECT x.id FROM messages x WHERE x.session_id = m.session_id AND x.id {op} m.id "
    "ORDER BY x.id {direction} LIMIT 1 OFFSET {skip})"
)
# each candidate with the ids of the turns 1 before, 1 after, 2 before, 2 after it
_NEIGHBOURS = (
    "SELECT m.id, "
    + ", ".join(
        _NEAR.format(op=op, direction=direction, skip=skip)
        for skip in (0, 1)
        for op, direction in (("<", "DESC"), (">", "ASC"))
    )
    + " FROM messages m WHERE m.id IN ({ids})"
)


def _count(conn: Connection, query: str) -> int:
    sql = "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :q"
    return int(conn.execute(text(sql), {"q": query}).scalar_one())


def _trigram_hits(
    conn: Connection, scope: SearchScope, terms: tuple[str, ...], parsed: ParsedQuery
) -> list[MessageHit]:
    filters, params = _filters(scope)
    params["q"] = fts_expression(terms)
    source = (
        "(SELECT rowid AS rid, bm25(messages_tri) AS rank_ FROM messages_tri "
        "WHERE messages_tri MATCH :q) f"
    )
    sql = _SELECT.format(score="-f.rank_", source=source, rowid="f.rid", filters=filters)
    return _run(conn, sql, params, parsed.terms)


def _like_hits(
    conn: Connection, scope: SearchScope, terms: tuple[str, ...], parsed: ParsedQuery
) -> list[MessageHit]:
    filters, params = _filters(scope)
    matched = []
    for i, term in enumerate(terms):
        params[f"t{i}"] = (
            "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        )
        matched.append(f"(m.content LIKE :t{i} ESCAPE '\\')")
    sql = (
        f"SELECT m.id, m.session_id, m.role, m.content, m.created_at, ({' + '.join(matched)}) "
        "AS score FROM messages m JOIN sessions s ON s.id = m.session_id "
        "WHERE m.user_id = :uid AND m.role IN ('user', 'assistant') "
        f"AND ({' OR '.join(matched)}) {filters} ORDER BY score DESC, m.id DESC LIMIT :n"
    )
    return _run(conn, sql, params, parsed.terms)


def _as_datetime(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
