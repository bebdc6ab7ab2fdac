"""Ranked message search over state.db, always confined to one user.

Natural-language queries are turned into safe FTS5 expressions (never a syntax error):
stopwords dropped, every term quoted, balanced quoted phrases kept, FTS syntax and
dangling operators stripped, dotted/hyphenated terms quoted whole. Korean, Chinese and
Japanese runs become bigrams and single characters (hermes/state/cjk.py) looked up in
`messages_cjk`. Both indexes are ranked the same way (IDF over the user's own messages,
length, a question handing half its score to its reply, neighbouring turns, the
session's coverage) and the two lists are merged by reciprocal rank fusion, so a mixed
question ("docker 그 포트") benefits from both and scores from different indexes never
need to be comparable: one lexical ranking. With
hybrid retrieval on, the user's nearest messages by embedding (hermes/state/vectors.py)
are a vector ranking, fused with the lexical one by trust (`fuse_trusted`): each side
weighs as much as its top stands out from its runners-up, the vectors also as far as the
model reads the question's script (hermes/scripts.py), so a paraphrase that shares no
word with its answer is found without burying what the words found.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from typing import Any

from sqlalchemy import Connection, text

from hermes.state.cjk import KOREAN_PARTICLES, is_cjk, korean_words, query_terms, whole_words
from hermes.state.cjk import runs as cjk_runs
from hermes.state.function_words import function_words, split_elision

RRF_K = 60
RUNNERS_UP = 10  # the hits a ranking's top is compared with to judge its commitment
CANDIDATES = 200  # per index, before fusion
BM25_K1, BM25_B = 1.2, 0.3
NEIGHBOUR_WEIGHT = 0.4
NEIGHBOUR2_WEIGHT = 0.3
SESSION_WEIGHT = 0.2
REPLY_OF = 10  # the best candidates whose next turn joins the candidates
ASKED_SHARE = 0.5  # of a question turn's own score, what its reply takes (README: ablation)
QUESTION_MARKS = ("?", "？", "؟")  # Latin and others, full-width (CJK), Arabic
MAX_CJK_LOOKUPS = 64  # a pasted page of CJK text makes thousands of bigrams: one query each

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
_PHRASE = re.compile(r'"([^"]+)"')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SEPARATORS = re.compile(r'["(){}\[\]^*+,;!?<>=|~`]')
_EDGE = re.compile(r"^[^\w]+|[^\w]+$")
_WORDCHARS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    words: tuple[str, ...] = ()  # terms and phrases for the word index (unquoted)
    cjk: tuple[str, ...] = ()  # CJK bigrams and characters for the CJK index

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
class Ranking:
    """The ranking steps after the index lookups, each switchable so that the recall
    benchmarks can measure what it adds (their ablation rows); search uses the default."""

    smoothing: bool = True  # neighbouring turns lend a message part of their score
    replies: bool = True  # the turn after a matching question joins the candidates
    asked: bool = True  # a question turn hands half its own score to the turn after it
    vector_asked: bool = True  # the same in the vector ranking (half its lead on the median)
    sessions: bool = True  # a message gains from its session's coverage of the query
    vector_smoothing: bool = False  # neighbouring turns lend their similarity too
    trusted: bool = True  # the two rankings fused by trust (else: reciprocal rank fusion)
    # the word ranking trusted only as far as its best head covers the question's IDF:
    # off, it lowered recall on LoCoMo and the paraphrase set (README, the ablation)
    coverage: bool = False


RANKING = Ranking()


@dataclass(frozen=True, slots=True)
class Neighbours:
    """A person's messages nearest to a question (hermes/state/vectors.py finds them),
    closest first, with what an unrelated message scores: the median similarity over
    all their messages and its spread (the median absolute deviation, scaled to a
    standard deviation)."""

    hits: list[tuple[int, float]]
    median: float = 0.0
    spread: float = 0.0
    trust: float = 1.0


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
    meaningful = _meaningful(tokens)
    words: list[str] = []
    cjk: list[str] = []
    for phrase in phrases:
        _route(phrase, words, cjk, whole=True)
    for token in meaningful or tokens:  # a query of only stopwords keeps them
        _route(token, words, cjk, whole=False)
    return ParsedQuery(tuple(dict.fromkeys(words)), tuple(dict.fromkeys(cjk)))


def _meaningful(tokens: list[str]) -> list[str]:
    """The tokens that are not function words: English ones, and those of the language
    the question is written in (hermes/state/function_words.py), with an elided article
    or pronoun taken off a word ("l'operazione": "operazione")."""
    theirs = function_words(tokens, STOPWORDS)
    kept = []
    for token in tokens:
        elided = split_elision(token) if theirs else None
        word = elided[1] if elided and elided[0].casefold() in theirs else token
        if word.casefold() not in STOPWORDS and word.casefold() not in theirs:
            kept.append(word)
    return kept


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
            for part in cjk_runs(run):
                cjk.extend(query_terms(part))


def quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fold(text_: str) -> str:
    """Text as the word index compares it on PostgreSQL: compatibility forms unified,
    diacritics removed, case folded (what SQLite's `unicode61 remove_diacritics 2` does)."""
    decomposed = unicodedata.normalize("NFKD", text_)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


_STEMMABLE = re.compile(r"[a-z]{4,}")
_LATIN_WORDS = re.compile(r"[a-z]+")


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str | None:
    """The Porter stem of an English-looking word, as SQLite's index stems its words;
    None for anything else (short words, digits, other scripts are kept whole)."""
    if not _STEMMABLE.fullmatch(word):
        return None
    return str(_porter().stemWord(word))


@functools.cache
def _porter() -> Any:
    import snowballstemmer  # noqa: PLC0415 - only a PostgreSQL search needs it

    return snowballstemmer.stemmer("porter")


def word_document(content: str, scope: str) -> str:
    """What PostgreSQL's word index is built from for one message: its scope term, the
    folded text (whole words, positions kept for phrases), then the Porter stem of each
    English-looking word, so that "paint" finds "painted" as it does on SQLite."""
    folded = fold(content)
    stems = {stem for w in _LATIN_WORDS.findall(folded) if (stem := _stem(w)) and stem != w}
    return " ".join([scope, folded, *sorted(stems)])


_TOKENS = re.compile(r"[^\W_]+")  # what SQLite's unicode61 keeps as one token


def word_keys(content: str, scope: str) -> list[str]:
    """What PostgreSQL's word lookups read for one message: each distinct token of the
    folded text (runs of letters and digits, as SQLite's tokenizer cuts them) and the
    Porter stem of each English-looking one, each prefixed with the person's scope term,
    so a lookup reads that person's postings of that word only."""
    folded = fold(content)
    tokens = set(_TOKENS.findall(folded))
    tokens |= {stem for w in _LATIN_WORDS.findall(folded) if (stem := _stem(w))}
    return [f"{scope}:{token}" for token in sorted(tokens)]


def scope_token(user_id: str) -> str:
    return "s" + user_id[2:]


PEOPLE_BATCH = 100  # people whose CJK or stem terms one lookup names


# Which keys (a person's scope token with a term) the index has, each looked up in the GIN
# index on its own and the first row enough: `keys && array` of a hundred people's keys
# was planned as a scan of every row, comparing each row's keys with the whole array.
_PEOPLE_MATCHING = text(
    "SELECT q.i FROM unnest(CAST(:keys AS text[])) WITH ORDINALITY AS q(key, i) "
    "WHERE EXISTS (SELECT 1 FROM message_terms WHERE keys @> ARRAY[q.key]) UNION ALL "
    "SELECT q.i + :n FROM unnest(CAST(:cjk AS text[])) WITH ORDINALITY AS q(key, i) "
    "WHERE EXISTS (SELECT 1 FROM message_terms WHERE cjk @> ARRAY[q.key])"
)


def people_with_matches(conn: Connection, raw: str, user_ids: list[str]) -> set[str]:
    """Which of these people have at least one message the word or CJK index matches
    for `raw` (any of its terms): the ones a search across people needs to rank, found
    in a few index lookups rather than one search per person."""
    parsed = parse_query(raw)
    tokens = {scope_token(user_id): user_id for user_id in user_ids}
    if parsed.empty or not tokens:
        return set()
    found: set[str] = set()
    batches = [list(tokens)[i : i + PEOPLE_BATCH] for i in range(0, len(tokens), PEOPLE_BATCH)]
    if conn.dialect.name == "postgresql":
        terms = [_lookup(word) for word in parsed.words]
        simple = [t for t in terms if " " not in t and _SIMPLE_TERM.fullmatch(t)]
        for phrase in (t for t in terms if t not in simple):
            sql = (
                "SELECT DISTINCT scope FROM message_terms "
                "WHERE words @@ phraseto_tsquery('simple', :t)"
            )
            found |= {row[0] for row in conn.execute(text(sql), {"t": phrase})}
        for batch in batches:
            pairs = [(token, f"{token}:{term}") for token in batch for term in simple]
            pairs += [(token, token + term) for token in batch for term in parsed.cjk]
            params = {
                "keys": [key for _token, key in pairs[: len(batch) * len(simple)]],
                "cjk": [key for _token, key in pairs[len(batch) * len(simple) :]],
                "n": len(batch) * len(simple),
            }
            found |= {pairs[row[0] - 1][0] for row in conn.execute(_PEOPLE_MATCHING, params)}
        return {tokens[token] for token in found if token in tokens}
    people: set[str] = set()
    if parsed.words:  # every person's postings: the people are read from the rows
        match = "body : (" + " OR ".join(quote(word) for word in parsed.words) + ")"
        sql = (
            "SELECT DISTINCT user_id FROM messages WHERE id IN "
            "(SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q)"
        )
        people |= {row[0] for row in conn.execute(text(sql), {"q": match})}
    for batch in batches if parsed.cjk else ():  # its terms carry the person's scope
        match = " OR ".join(quote(token + term) for token in batch for term in parsed.cjk)
        sql = (
            "SELECT DISTINCT user_id FROM messages WHERE id IN "
            "(SELECT rowid FROM messages_cjk WHERE messages_cjk MATCH :q)"
        )
        people |= {row[0] for row in conn.execute(text(sql), {"q": match})}
    return people & set(user_ids)


def search_messages(
    conn: Connection,
    scope: SearchScope,
    raw: str,
    limit: int,
    *,
    nearest: Neighbours | None = None,
    ranking: Ranking = RANKING,
) -> list[MessageHit]:
    """The user's best-matching messages, best first (at most `limit`). `nearest`: the
    user's messages closest to the query's embedding, closest first, with what an
    unrelated message scores (hermes/state/vectors.py)."""
    parsed = parse_query(raw)
    if parsed.empty and not (nearest and nearest.hits):
        return []
    ranked: list[list[MessageHit]] = []
    covered: list[float] = []  # of each list: the share of the question its best head covers
    if parsed.words:
        hits, coverage = _index_hits(
            conn, scope, parsed.words, "messages_fts", parsed.terms, ranking=ranking
        )
        ranked.append(hits)
        covered.append(coverage)
    if parsed.cjk:
        # a mixed question's Latin words too: "redis는" is one token of the word index,
        # and the CJK index has "redis" for it (hermes/state/cjk.py)
        glued = tuple(w.casefold() for w in parsed.words if " " not in w)
        lookups = tuple(dict.fromkeys(parsed.cjk + glued))[:MAX_CJK_LOOKUPS]
        words = korean_words(raw)
        hits, coverage = _index_hits(
            conn, scope, lookups, "messages_cjk", parsed.terms, ranking=ranking, whole=words
        )
        ranked.append(hits)
        covered.append(coverage)
    lexical = fuse(ranked)
    if not nearest or not nearest.hits:
        return lexical[:limit]
    vector = vector_ranking(conn, scope, nearest, parsed.terms, ranking)
    if not ranking.trusted:
        return fuse([lexical, vector])[:limit]
    coverage = max(covered, default=0.0) if ranking.coverage else 1.0
    return fuse_trusted(lexical, vector, nearest, coverage)[:limit]


def vector_ranking(
    conn: Connection,
    scope: SearchScope,
    nearest: Neighbours,
    terms: tuple[str, ...],
    ranking: Ranking = RANKING,
) -> list[MessageHit]:
    """The nearest messages that pass the scope's filters (as the lexical candidates
    do), by similarity. A question among them hands half its lead over the person's
    median similarity to its reply (`_answered`; the reply joins the list at the median,
    what an unrelated message scores, when it is not among them). With
    `ranking.vector_smoothing`, a message's neighbouring turns lend it their similarity
    with the lexical ranking's weights (off by default: it buried paraphrases under
    their neighbours in the recall benchmarks)."""
    similarity = dict(nearest.hits)
    candidates, near = _load(conn, scope, [mid for mid, _ in nearest.hits], terms)
    own = {h.message_id: similarity[h.message_id] for h in candidates}
    if ranking.vector_asked:
        replies = [near[h.message_id][1] for h in candidates if _asks(h)]
        missing = [r for r in replies if r is not None and r not in own]
        if missing:
            extra, extra_near = _load(conn, scope, missing, terms)
            candidates += extra
            near |= extra_near
            own |= {h.message_id: nearest.median for h in extra}
        own = _answered(candidates, near, own, nearest.median)
    if ranking.vector_smoothing and len(candidates) >= 2:
        return _smoothed(candidates, near, own)
    ranked = sorted(candidates, key=lambda h: (-own[h.message_id], -h.message_id))
    return [_rescored(hit, own[hit.message_id]) for hit in ranked]


def fuse(ranked: list[list[MessageHit]]) -> list[MessageHit]:
    """The word and CJK rankings as one lexical ranking (reciprocal rank fusion: their
    scores are not comparable, their ranks are)."""
    if len(ranked) <= 1:
        return ranked[0] if ranked else []
    scores: dict[int, float] = {}
    first: dict[int, MessageHit] = {}
    for hits in ranked:
        for rank, hit in enumerate(hits):
            scores[hit.message_id] = scores.get(hit.message_id, 0.0) + 1.0 / (RRF_K + rank + 1)
            first.setdefault(hit.message_id, hit)
    order = sorted(scores, key=lambda mid: (-scores[mid], -mid))
    return [_rescored(first[mid], scores[mid]) for mid in order]


def fuse_trusted(
    lexical: list[MessageHit],
    vector: list[MessageHit],
    nearest: Neighbours,
    coverage: float = 1.0,
) -> list[MessageHit]:
    """One lexical and one vector ranking as one, each weighted by how far it can be
    trusted for this question.

    A ranking is trusted by its commitment: how far its top hit stands above its
    runners-up (the next RUNNERS_UP), in units of its own noise (the spread of the
    person's similarities for the vectors, of the candidates' scores for the words). A
    list that ranks many messages about equally is guessing among them, whatever its
    raw scores; one whose top stands out has found something. The vector side is
    further scaled by the model's reading of the question's script (`nearest.trust`);
    with `Ranking.coverage` (off: the benchmarks' ablation), the word side is scaled by
    `coverage`, the share of the question's rarity (its terms' IDF) that the best
    message near its top holds.
    Each message's score within its list is taken relative to the same runners-up (0
    at the list's RUNNERS_UP+1-th hit, 1 at its top), so the two are on one scale, and
    the fused score is the trust-weighted sum. When one list is confident and the
    other is not, the confident one's order stands; when both are, messages both rank
    high come first."""
    lex_scores = [hit.score for hit in lexical]
    vec_scores = [hit.score for hit in vector]
    w_lex = commitment(lex_scores, 0.0, None) * coverage
    w_vec = commitment(vec_scores, nearest.median, nearest.spread) * nearest.trust
    if w_lex == 0.0 and w_vec == 0.0:  # neither stands out: each as far as it can read
        w_lex, w_vec = 1.0, nearest.trust
    lex_norm = _relative(lex_scores, 0.0)
    vec_norm = _relative(vec_scores, nearest.median)
    fused: dict[int, float] = {}
    tie: dict[int, float] = {}  # among equals (below both lists' runners-up, say): RRF
    first: dict[int, MessageHit] = {}
    for hits, weight, norm in ((lexical, w_lex, lex_norm), (vector, w_vec, vec_norm)):
        for rank, (hit, value) in enumerate(zip(hits, norm, strict=True)):
            mid = hit.message_id
            fused[mid] = fused.get(mid, 0.0) + weight * value
            tie[mid] = tie.get(mid, 0.0) + 1.0 / (RRF_K + rank + 1)
            first.setdefault(mid, hit)
    order = sorted(fused, key=lambda mid: (-fused[mid], -tie[mid], -mid))
    return [_rescored(first[mid], fused[mid]) for mid in order]


def commitment(scores: list[float], baseline: float, spread: float | None) -> float:
    """How many noise widths a ranking's top score stands above the mean of its next
    RUNNERS_UP (fewer hits: the rest count at `baseline`, what an unranked message
    scores). The noise width is `spread`, or with None the standard deviation of those
    RUNNERS_UP+1 scores."""
    if not scores:
        return 0.0
    head = scores[: RUNNERS_UP + 1]
    head = head + [baseline] * (RUNNERS_UP + 1 - len(head))
    rest = head[1:]
    if spread is None:
        spread = statistics.pstdev(scores if len(scores) > RUNNERS_UP else head)
    if spread <= 0.0:
        return 0.0
    return max(0.0, (head[0] - sum(rest) / len(rest)) / spread)


def _relative(scores: list[float], baseline: float) -> list[float]:
    """Each score as a fraction of the top's lead over the list's RUNNERS_UP+1-th score
    (over `baseline` for shorter lists): 1 at the top, 0 at or below that one."""
    if not scores:
        return []
    floor = scores[RUNNERS_UP] if len(scores) > RUNNERS_UP else baseline
    lead = scores[0] - floor
    if lead <= 0.0:
        return [1.0 if s >= scores[0] else 0.0 for s in scores]
    return [max(0.0, (s - floor) / lead) for s in scores]


def _rescored(hit: MessageHit, score: float) -> MessageHit:
    return MessageHit(
        hit.message_id, hit.session_id, hit.role, hit.content, hit.created_at, score, hit.terms
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


def _index_hits(
    conn: Connection,
    scope: SearchScope,
    lookups: tuple[str, ...],
    table: str,
    terms: tuple[str, ...],
    *,
    ranking: Ranking = RANKING,
    whole: list[str] | None = None,
) -> tuple[list[MessageHit], float]:
    """BM25 over this user's own messages in one index, then context-aware reranking.

    FTS5's built-in bm25() takes its statistics from every user's messages, so a word
    that is rare overall but common for this person (their own name, their project)
    would outweigh the words that matter; it is also the costly part of a query. Here
    each term's postings are read once, confined to the user by the scope token, and
    IDF comes from the user's messages alone. Term frequency is taken as 1 (chat
    messages are short). The best candidates are then loaded, length-normalized and
    smoothed with their neighbouring turns and their session's coverage of the query.
    Also returned: the largest share of the query terms' summed IDF that one message
    among the first RUNNERS_UP+1 of the ranking matches itself (what `fuse_trusted`
    weighs the ranking by).
    """
    token = scope_token(scope.user_id)
    weights: dict[int, float] = {}
    idf_of: dict[str, float] = {}
    postings: dict[str, list[int]] = {}
    if conn.dialect.name == "postgresql":  # the count and every term: one round trip
        total, server = _pg_postings(conn, table, token, lookups)
    else:
        total, server = _count(conn, table, token), {}
    for word in lookups:
        if table == "messages_cjk":  # its terms carry the scope (hermes/state/cjk.py)
            query = {"q": quote(token + word)}
        else:
            query = {"q": f"scope : {token} AND {quote(word)}"}
        if conn.dialect.name == "postgresql":
            postings[word] = server.get(word, [])
        else:
            rows = conn.execute(text(_POSTINGS.format(table=table)), query)
            postings[word] = [row[0] for row in rows]
        n = len(postings[word])
        idf_of[word] = math.log(1 + (total - n + 0.5) / (n + 0.5))
        for rowid in postings[word]:
            weights[rowid] = weights.get(rowid, 0.0) + idf_of[word]
    ranked = sorted(weights, key=lambda rowid: (-weights[rowid], -rowid))
    order = _with_replies(conn, ranked, weights) if ranking.replies else ranked
    candidates, near = _load(conn, scope, order, terms)
    total_idf = sum(idf_of.values())
    if len(candidates) < 2:  # nothing to rerank: its own weight is its score
        alone = [_rescored(hit, weights.get(hit.message_id, 0.0)) for hit in candidates]
        return alone, _coverage(alone, weights, total_idf)
    for hit in candidates if whole else ():  # a Korean word met whole, not inside another
        for word in whole_words(hit.content, whole or []):
            bonus = max(idf_of.get(word[i : i + 2], 0.0) for i in range(len(word) - 1))
            weights[hit.message_id] = weights.get(hit.message_id, 0.0) + bonus
    if not ranking.sessions:
        postings = {}
    ranked_hits = _rerank(candidates, near, weights, postings, idf_of, ranking=ranking)
    return ranked_hits, _coverage(ranked_hits, weights, total_idf)


def _coverage(hits: list[MessageHit], weights: dict[int, float], total_idf: float) -> float:
    if total_idf <= 0.0:
        return 0.0
    head = hits[: RUNNERS_UP + 1]
    return min(1.0, max((weights.get(h.message_id, 0.0) for h in head), default=0.0) / total_idf)


def _with_replies(conn: Connection, order: list[int], weights: dict[int, float]) -> list[int]:
    """The turn after each of the best REPLY_OF candidates that asks a question joins
    them, right behind it: an answer often shares no word with the question it answers
    ("When do you move?" / "The 23rd"), only with the turn before it. It has no weight
    of its own; its neighbour's carries it in the rerank."""
    if not REPLY_OF or not order:
        return order
    head = order[:REPLY_OF]
    ids = ",".join(str(rowid) for rowid in head)
    following = {int(r[0]): r[1] for r in conn.execute(text(_FOLLOWING.format(ids=ids))).all()}
    expanded: list[int] = []
    for rowid in head:
        expanded.append(rowid)
        reply = following.get(rowid)
        if reply is not None and reply not in weights and reply not in expanded:
            expanded.append(reply)
    return expanded + order[REPLY_OF:]


_POSTINGS = "SELECT rowid FROM {table} WHERE {table} MATCH :q"


def _load(
    conn: Connection, scope: SearchScope, order: list[int], terms: tuple[str, ...]
) -> tuple[list[MessageHit], dict[int, Near]]:
    """The first CANDIDATES messages of `order` that pass the scope's filters, and the
    ids of the turns around each (1 before, 1 after, 2 before, 2 after it in its
    session), read in the same statement."""
    filters, params = _filters(scope)
    params.pop("n")
    found: dict[int, MessageHit] = {}
    near: dict[int, Near] = {}
    for start in range(0, len(order), CANDIDATES):
        page = order[start : start + CANDIDATES]
        sql = (
            f"SELECT m.id, m.session_id, m.role, m.content, m.created_at, 0.0, {_AROUND} "
            "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.user_id = :uid "
            f"AND m.id IN ({','.join(str(i) for i in page)}) {filters}"
        )
        for row in conn.execute(text(sql), params).all():
            found[row[0]] = MessageHit(
                row[0], row[1], row[2], row[3], _as_datetime(row[4]), 0.0, terms
            )
            near[row[0]] = (row[6], row[7], row[8], row[9])
        if len(found) >= CANDIDATES:
            break
    return [found[i] for i in order if i in found][:CANDIDATES], near


def _rerank(
    candidates: list[MessageHit],
    near: dict[int, Near],
    weights: dict[int, float],
    postings: dict[str, list[int]],
    idf_of: dict[str, float],
    *,
    ranking: Ranking = RANKING,
) -> list[MessageHit]:
    lengths = {hit.message_id: max(1, len(hit.content.split())) for hit in candidates}
    average = sum(lengths.values()) / len(lengths)
    base = {
        mid: weights.get(mid, 0.0)
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
    coverage = {
        mid: SESSION_WEIGHT * sum(covered.get(session_of[mid], {}).values()) for mid in base
    }
    if ranking.asked:
        base = _answered(candidates, near, base)
    return _smoothed(candidates, near if ranking.smoothing else None, base, coverage)


def _answered(
    candidates: list[MessageHit],
    near: dict[int, Near],
    base: dict[int, float],
    floor: float = 0.0,
) -> dict[int, float]:
    """A turn that asks a question shares what it scored with the turn after it
    (ASKED_SHARE of its score above `floor`, what an unrelated message scores, moves
    there): a question's words, or its meaning, mark where something was asked, its
    reply is where it was answered ("What pet do you have?" / "A cat, Bailey"), and a
    search is for the answer. The question keeps the rest, so it still ranks where
    nothing answered it. In the order said: a reply that asks again hands half on."""
    moved = dict(base)
    for hit in sorted(candidates, key=lambda h: h.message_id):
        reply = near[hit.message_id][1]
        if reply is not None and reply in base and _asks(hit):
            share = ASKED_SHARE * max(0.0, moved[hit.message_id] - floor)
            moved[hit.message_id] -= share
            moved[reply] += share
    return moved


def _asks(hit: MessageHit) -> bool:
    return hit.content.rstrip().endswith(QUESTION_MARKS)


def _smoothed(
    candidates: list[MessageHit],
    near: dict[int, Near] | None,
    base: dict[int, float],
    extra: dict[int, float] | None = None,
) -> list[MessageHit]:
    """Candidates reranked by their score plus their neighbouring turns' (1 and 2 turns
    away in the same session, among the candidates; none without `near`) and `extra`."""
    final = {}
    for hit in candidates:
        mid = hit.message_id
        p1, n1, p2, n2 = near[mid] if near is not None else (None, None, None, None)
        final[mid] = (
            base.get(mid, 0.0)
            + NEIGHBOUR_WEIGHT * (base.get(p1 or 0, 0.0) + base.get(n1 or 0, 0.0))
            + NEIGHBOUR2_WEIGHT * (base.get(p2 or 0, 0.0) + base.get(n2 or 0, 0.0))
            + (extra or {}).get(mid, 0.0)
        )
    ranked = sorted(candidates, key=lambda h: (-final[h.message_id], -h.message_id))
    return [_rescored(hit, final[hit.message_id]) for hit in ranked]


_NEAR = (
    "(SELECT x.id FROM messages x WHERE x.session_id = m.session_id AND x.id {op} m.id "
    "ORDER BY x.id {direction} LIMIT 1 OFFSET {skip})"
)
# the ids of the turns 1 before, 1 after, 2 before, 2 after a message `m`
_AROUND = ", ".join(
    _NEAR.format(op=op, direction=direction, skip=skip)
    for skip in (0, 1)
    for op, direction in (("<", "DESC"), (">", "ASC"))
)
Near = tuple[int | None, int | None, int | None, int | None]


_FOLLOWING = (
    "SELECT m.id, "
    + _NEAR.format(op=">", direction="ASC", skip=0)
    + " FROM messages m WHERE m.id IN ({ids}) AND m.role IN ('user', 'assistant')"
    " AND (" + " OR ".join(f"rtrim(m.content) LIKE '%{mark}'" for mark in QUESTION_MARKS) + ")"
)


def _count(conn: Connection, table: str, token: str) -> int:
    """How many of the person's messages `table` indexes (their scope token's rows)."""
    sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH :q"
    return int(conn.execute(text(sql), {"q": f"scope : {token}"}).scalar_one())


def _pg_postings(
    conn: Connection, table: str, token: str, words: tuple[str, ...]
) -> tuple[int, dict[str, list[int]]]:
    """PostgreSQL's counterpart of `_count` and the FTS5 lookups, in one round trip
    (hermes/state/postgres.py keeps the terms): how many of the person's messages the
    index holds, and for each term the person's messages that hold it, found inside the
    GIN index by keys that hold the person's scope term (`word_keys`; the CJK terms
    carry it too), so only that person's postings of the term are read, each term's as
    one array (thousands of rows one by one cost more to read than to find). A word of
    one token is looked up by its stem when it has one (the keys hold the stems);
    several tokens, or a term the tokenizer would cut, as a phrase of the tsvector."""
    if table == "messages_cjk":
        terms = [token + word for word in words]
        sql = (
            "SELECT (SELECT count(*) FROM message_terms WHERE scope = :s "
            "AND cardinality(cjk) > 0), q.i, ARRAY(SELECT message_id FROM message_terms "
            "WHERE cjk @> ARRAY[q.term]) FROM unnest(CAST(:terms AS text[])) "
            "WITH ORDINALITY AS q(term, i)"
        )
        params: dict[str, Any] = {"terms": terms, "s": token}
    else:
        terms = [_lookup(word) for word in words]
        phrase = [" " in term or not _SIMPLE_TERM.fullmatch(term) for term in terms]
        sql = (
            "SELECT (SELECT count(*) FROM message_terms WHERE scope = :s), q.i, "
            "CASE WHEN q.phrase THEN ARRAY(SELECT message_id FROM message_terms WHERE words @@ "
            "(to_tsquery('simple', :s) && phraseto_tsquery('simple', q.term))) "
            "ELSE ARRAY(SELECT message_id FROM message_terms WHERE keys @> "
            "ARRAY[:s || ':' || q.term]) END "
            "FROM unnest(CAST(:terms AS text[]), CAST(:phrase AS boolean[])) "
            "WITH ORDINALITY AS q(term, phrase, i)"
        )
        params = {"terms": terms, "phrase": phrase, "s": token}
    found: dict[str, list[int]] = {word: [] for word in words}
    total = 0
    for count, index, message_ids in conn.execute(text(sql), params).all():
        total = int(count)
        found[words[index - 1]] = message_ids
    return total, found


_SIMPLE_TERM = re.compile(r"[^\W_]+")  # one word the tsquery syntax takes as it is


def _lookup(word: str) -> str:
    folded = fold(word)
    return _stem(folded) or folded


def _as_datetime(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
