"""Does a consolidated entry still say what its sources said?

The consolidation validator asks four questions of every new entry and the source
entries merged into it, in any language the memory is written in:

- **nothing new**: no content word or number that none of its sources has;
- **nothing lost** (coverage): every content word and every number of every source;
- **numbers stay attached** to what they measure: a number keeps the nearest content
  words it had on each side in its clause (so "laptop 32 GB, server 64 GB" cannot become
  "laptop 64 GB, server 32 GB");
- **words keep their order and their role**: two content words of a source clause
  never change places around a word that stays between them, and a clause of the new
  text that takes words from two clauses of one source takes those clauses whole
  ("back up the database before every deploy" cannot become "deploy before every
  database back up"; "the orders database is production, the analytics one staging"
  cannot swap the two; tea in the morning cannot swap with coffee after lunch);
- **polarity holds**: negations and modal words (not, never, always, must, only... and
  their equivalents in Korean, Chinese, Japanese, Spanish, German, French, Russian,
  Italian, Portuguese) keep their count, and each keeps its scope: the content words
  next to it in its clause stay next to a word of the same kind ("never X; always Y"
  cannot become "always X; never Y").

Text is cut into tokens without a dictionary: space-delimited words (casefolded; a
Korean word without its trailing particle), every Han character and Katakana run on
its own (Hiragana is grammar), numbers whole ("1.22", "9:30"), and polarity markers,
which are not content. A word and its inflected form match (prefer / prefers,
Hund / Hunde, 서울에서 / 서울).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from hermes.state.cjk import KOREAN_PARTICLES


class Polarity(StrEnum):
    NEGATION = "negation"
    ALWAYS = "always"
    MUST = "must"
    ONLY = "only"


# Whole words (space-delimited languages), casefolded.
_MARKER_WORDS: dict[Polarity, frozenset[str]] = {
    Polarity.NEGATION: frozenset(
        # en
        "not no never none nothing nobody nowhere neither nor without cannot "
        # es / pt / it
        "nunca jamás jamas ni sin nadie nada tampoco não nao nem sem non mai niente nessuno "
        # de
        "nicht kein keine keinen keinem keiner keines nie niemals nichts niemand ohne "
        # fr
        "ne pas jamais rien aucun aucune sans "
        # ru
        "не нет никогда ни ничего никто без "
        # ko (as separate words)
        "안 못".split()
    ),
    Polarity.ALWAYS: frozenset(
        "always forever constantly invariably siempre sempre immer stets toujours всегда "
        "항상 늘 언제나 매번".split()
    ),
    Polarity.MUST: frozenset(
        "must should need needs required require requires mandatory "
        "debe deben debes necesita deve devem muss müssen musst soll sollte sollen "
        "doit doivent dois faut devrait должен должна должно должны нужно надо обязательно "
        "반드시 꼭".split()
    ),
    Polarity.ONLY: frozenset(
        "only solely exclusively solo sólo solamente únicamente unicamente apenas soltanto "
        "nur ausschließlich ausschliesslich seulement uniquement только лишь 오직".split()
    ),
}
# Substrings inside words (Chinese, Japanese, Korean endings), longest first.
_MARKER_PARTS: dict[Polarity, tuple[str, ...]] = {
    Polarity.NEGATION: (
        "なかっ",
        "ません",
        "ない",
        "不",
        "没",
        "沒",
        "別",
        "别",
        "无",
        "無",
        "非",
        "未",
        "勿",
        "않",
        "없",
        "못",
        "말고",
        "말아",
        "마세요",
        "禁止",
    ),
    Polarity.ALWAYS: ("总是", "總是", "一直", "永远", "永遠", "每次", "いつも", "常に", "毎回"),
    Polarity.MUST: (
        "必须",
        "必須",
        "务必",
        "務必",
        "一定",
        "应该",
        "應該",
        "必ず",
        "べき",
        "なければ",
        "해야",
        "필요",
    ),
    Polarity.ONLY: ("只有", "仅", "僅", "只", "だけ", "のみ", "しか", "뿐"),
}
_FUNCTION_WORDS = frozenset(
    # en
    "a an the of to in on at by for with from and or but as is are was were be been being "
    "it its this that these those there here has have had do does did so than then also "
    "very into onto via per etc i me my we our you your he she they them their his her "
    "who which what when where while if about over under up down out off "
    # es / pt / it
    "el la los las un una unos unas de del al y o en con por para que es son está están "
    "lo le se su sus mi tu os as um uma do da dos das e em com para il gli di che è "
    # de
    "der die das ein eine einen einem einer und oder mit von zu im am ist sind für auf den "
    "dem des bei aus nach sich es er sie wir ich"
    # fr
    " le les des du et ou avec pour par est sont au aux dans sur ce cette ces il elle je "
    "nous vous ils elles qui "
    # ru
    "и в во на с со по к у о об из за для это что как а но или он она они мы я".split()
)
# Rewording a merge may need that adds no fact.
_CONNECTIVES = frozenset(
    "also uses use used prefers prefer likes like has have with and plus via both each "
    "user user's users their they them its including incl etc e.g. runs run works".split()
)
# Of those, the ones a merge may drop ("uses X" -> "with X"); "likes" or "prefers" must stay.
_LINKING = frozenset("also uses use used has have with and plus via both each runs run".split())
# Chinese function characters (particles, copula, conjunctions): grammar, not content
_HAN_FUNCTION = frozenset("的了是在和与與及或也都就很着著过過吧呢吗嗎啊之把被")
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
# Clauses end at punctuation, but not inside a number ("1.22") or a list of numbers
# ("0, 1, 2"), and not at a colon ("Editor: Neovim" is one clause).
_CLAUSE_BREAK = re.compile(r"[;!?\n，。；！？、]|(?<!\d),|,(?!\s?\d)|(?<!\d)\.|\.(?!\d)|\s[-–—]\s")
_HAN_OR_KANA = re.compile("[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
_HANGUL = re.compile("[\uac00-\ud7af]")
_NOT_SUFFIX = re.compile(r"n['’]t$")


def _is_han(char: str) -> bool:
    code = ord(char)
    return 0x3400 <= code <= 0x9FFF or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FA1F


def _is_hiragana(char: str) -> bool:
    return 0x3040 <= ord(char) <= 0x309F


def _is_katakana(char: str) -> bool:
    return 0x30A0 <= ord(char) <= 0x30FF


def _is_hangul(char: str) -> bool:
    return 0xAC00 <= ord(char) <= 0xD7AF


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # word | number | marker
    value: str  # the word (normalized), the number, or the Polarity of a marker
    clause: int
    position: int  # order in the text
    name: bool = False  # a capitalized word inside its clause: a name, like a number a value


def tokens(text: str) -> list[Token]:
    """The text's content words, numbers and polarity markers, in order, with clauses."""
    return list(_tokens(text))


@functools.lru_cache(maxsize=4096)  # a store's entries are read again and again
def _tokens(text: str) -> tuple[Token, ...]:
    out: list[Token] = []
    clause_ends = [m.start() for m in _CLAUSE_BREAK.finditer(text)]

    def clause_of(offset: int) -> int:
        return sum(1 for end in clause_ends if end < offset)

    spans = [(m.start(), "number", m.group()) for m in _NUMBER.finditer(text)]
    spans += [(m.start(), "word", m.group()) for m in _WORD.finditer(text)]
    for start, kind, value in sorted(spans):
        clause = clause_of(start)
        if kind == "number":
            pieces = [(kind, value)]
        elif len(value) == 1 and _attached(text, start, start + 1):
            pieces = [("word", value.casefold())]  # the 'a' of 'db-a': a name's part
        else:
            pieces = _word_pieces(value.casefold())
        inside = bool(out) and out[-1].clause == clause
        name = inside and value[:1].isupper() and len(pieces) == 1
        for piece_kind, piece in pieces:
            out.append(Token(piece_kind, piece, clause, len(out), name and piece_kind == "word"))
    return tuple(out)


def _attached(text: str, start: int, end: int) -> bool:
    """The span is joined to a neighbouring letter or digit by '-' or '_' (db-a, node_b,
    plan-B): part of an identifier, which one letter tells apart from another."""
    before = start >= 2 and text[start - 1] in "-_" and text[start - 2].isalnum()
    after = end + 1 < len(text) and text[end] in "-_" and text[end + 1].isalnum()
    return before or after


def _word_pieces(word: str) -> list[tuple[str, str]]:
    """One word as content and marker pieces."""
    for polarity, words in _MARKER_WORDS.items():
        if word in words:
            return [("marker", polarity.value)]
    if _NOT_SUFFIX.search(word):
        return [("marker", Polarity.NEGATION.value)]
    if _HAN_OR_KANA.search(word):
        return _cjk_pieces(word)
    if _HANGUL.search(word):
        return _hangul_pieces(word)
    if len(word) < 2 or word in _FUNCTION_WORDS:
        return []
    return [("word", word)]


def _marker_at(word: str, i: int) -> tuple[Polarity, str] | None:
    found: tuple[Polarity, str] | None = None
    for polarity, parts in _MARKER_PARTS.items():
        for part in parts:
            if word.startswith(part, i) and (found is None or len(part) > len(found[1])):
                found = (polarity, part)
    return found


def _cjk_pieces(word: str) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    i = 0
    while i < len(word):
        marker = _marker_at(word, i)
        if marker is not None:
            pieces.append(("marker", marker[0].value))
            i += len(marker[1])
            continue
        char = word[i]
        if _is_katakana(char) or not (_is_han(char) or _is_hiragana(char)):
            j = i + 1  # a Katakana run, or a run of other letters ("docker的")
            while j < len(word) and _is_katakana(word[j]) == _is_katakana(char):
                if _is_han(word[j]) or _is_hiragana(word[j]):
                    break
                j += 1
            if j - i > 1 or _is_katakana(char):
                pieces.append(("word", word[i:j]))
            i = j
            continue
        if _is_han(char) and char not in _HAN_FUNCTION:
            pieces.append(("word", char))
        i += 1
    return pieces


def _hangul_pieces(word: str) -> list[tuple[str, str]]:
    markers = []
    i = 0
    while i < len(word):
        marker = _marker_at(word, i)
        if marker is not None:
            markers.append(("marker", marker[0].value))
            i += len(marker[1])
        else:
            i += 1
    if markers:
        return markers  # 좋아하지않는다 -> a negation; the verb stays in the word before it
    if len(word) > 1 and word.endswith("만"):  # 커피만: only coffee
        return [("word", _strip_particle(word[:-1])), ("marker", Polarity.ONLY.value)]
    return [("word", _strip_particle(word))]


def _strip_particle(word: str) -> str:
    for particle in KOREAN_PARTICLES:
        if word.endswith(particle) and len(word) > len(particle):
            return word[: -len(particle)]
    return word


def same_word(a: str, b: str) -> bool:
    """The same word, or an inflected form of it."""
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    if len(short) < 2 or (len(short) < 3 and not _is_hangul(short[0])):
        return False
    return long.startswith(short) or (len(short) >= 5 and long[:5] == short[:5])


def _known(word: str, pool: set[str]) -> bool:
    return word in pool or any(same_word(word, other) for other in pool)


def _words(toks: list[Token]) -> set[str]:
    return {t.value for t in toks if t.kind == "word"}


def _numbers(toks: list[Token]) -> set[str]:
    return {t.value for t in toks if t.kind == "number"}


def _count(toks: list[Token], number: str) -> int:
    return sum(1 for t in toks if t.kind == "number" and t.value == number)


def _neighbours(toks: list[Token], at: Token, reach: int = 1) -> tuple[list[str], list[str]]:
    """The `reach` nearest content words before and after `at` within its clause
    (skipping rewording words such as "use" or "has", which say little on their own)."""
    same = [t for t in toks if t.clause == at.clause and t.kind == "word"]
    strong = [t for t in same if t.value not in _CONNECTIVES] or same
    before = [t.value for t in strong if t.position < at.position][-reach:]
    after = [t.value for t in strong if t.position > at.position][:reach]
    return before, after


def _kept_around(new: list[Token], home: Token, before: list[str], after: list[str]) -> bool:
    """`before` words precede `home` and `after` words follow it, in its clause."""
    clause = [t for t in new if t.clause == home.clause and t.kind == "word"]
    ahead = {t.value for t in clause if t.position < home.position}
    behind = {t.value for t in clause if t.position > home.position}
    return all(_known(w, ahead) for w in before) and all(_known(w, behind) for w in after)


def _clause_words(toks: list[Token], clause: int) -> set[str]:
    return {t.value for t in toks if t.clause == clause and t.kind == "word"}


def meaning_changes(text: str, sources: list[str]) -> list[str]:
    """What `text` changes in what `sources` said (empty: it keeps their meaning)."""
    new = tokens(text)
    old = [tokens(source) for source in sources]
    problems: list[str] = []
    pool_words = set().union(*(_words(t) for t in old)) if old else set()
    pool_numbers = set().union(*(_numbers(t) for t in old)) if old else set()
    novel_numbers = sorted(_numbers(new) - pool_numbers)
    if novel_numbers:
        problems.append(f"introduces numbers {novel_numbers}")
    novel = [
        w
        for w in dict.fromkeys(t.value for t in new if t.kind == "word")
        if w not in _CONNECTIVES and not _known(w, pool_words)
    ]
    if novel:
        problems.append(f"introduces words not in its sources: {novel[:5]}")
    new_words = _words(new)
    for source, toks in zip(sources, old, strict=True):
        lost = [
            w
            for w in dict.fromkeys(t.value for t in toks if t.kind == "word")
            if w not in _LINKING and not _known(w, new_words)
        ]
        lost_numbers = sorted(  # also one of two mentions: "Note 7: ... replica 7"
            n for n in _numbers(toks) if _count(new, n) < _count(list(toks), n)
        )
        if lost or lost_numbers:
            what = ", ".join([*lost_numbers, *lost][:6])
            problems.append(f"loses what {_quote(source)} said ({what})")
            continue
        problems += _detached(source, toks, new) or _rearranged(source, toks, new)
    problems += _polarity_changes(old, new, sources)
    return problems


def _detached(source: str, toks: list[Token], new: list[Token]) -> list[str]:
    """Numbers and names that no longer sit in a clause with what they belong to."""
    problems = []
    for value in (t for t in toks if t.kind == "number" or t.name):
        before, after = _neighbours(toks, value, reach=2 if value.kind == "number" else 1)
        near = before + after  # a unit may move to the other side: "RAM: 32 GB"
        homes = [
            t
            for t in new
            if t.kind == value.kind
            and (t.value == value.value or (t.kind == "word" and same_word(t.value, value.value)))
        ]
        if not any(all(_known(w, _clause_words(new, h.clause)) for w in near) for h in homes):
            problems.append(f"moves {value.value} away from {' / '.join(near)} ({_quote(source)})")
    return problems


def _rearranged(source: str, toks: list[Token], new: list[Token]) -> list[str]:
    """Content words of one source clause out of their order, or clauses of one source
    split and recombined (see the module's docstring). Only words that occur in one
    clause of the source are followed: a word it repeats has no single place."""
    clauses: dict[int, list[str]] = {}
    for t in toks:
        if t.kind == "word" and t.value not in _CONNECTIVES:
            clauses.setdefault(t.clause, []).append(t.value)
    places: dict[str, set[int]] = {}
    for clause, words in clauses.items():
        for word in words:
            places.setdefault(word, set()).add(clause)
    home = {word: next(iter(found)) for word, found in places.items() if len(found) == 1}
    for clause in sorted({t.clause for t in new}):
        here = [t.value for t in new if t.clause == clause and t.kind == "word"]
        drawn = [(word, home[word]) for word in map(lambda w: _source_word(w, home), here)
                 if word is not None]  # fmt: skip
        from_clauses = {c for _, c in drawn}
        for origin in from_clauses:
            expected = [w for w in clauses[origin] if w in home]
            seen = list(dict.fromkeys(w for w, c in drawn if c == origin))
            if (swapped := _swapped(expected, seen)) is not None:
                return [f"swaps {swapped} ({_quote(source)})"]
            if len(from_clauses) > 1 and len(seen) < len(set(expected)):
                missing = [w for w in expected if w not in seen]
                return [f"recombines parts of its clauses, away from {' / '.join(missing)} "
                        f"({_quote(source)})"]  # fmt: skip
    return []


def _swapped(expected: list[str], seen: list[str]) -> str | None:
    """Two words that changed places around a word that stayed between them ("tea in
    the morning, coffee after lunch" -> "coffee in the morning, tea after lunch"); a
    pair with nothing between them may turn ("laptop is a ThinkPad" -> "ThinkPad
    laptop"). `expected`: the source's order; `seen`: the new text's."""
    was = {w: i for i, w in enumerate(expected)}
    now = {w: i for i, w in enumerate(seen)}
    for a in seen:
        for b in seen:
            if not (was[a] < was[b] and now[a] > now[b]):
                continue
            for c in seen:
                if was[a] < was[c] < was[b] and now[b] < now[c] < now[a]:
                    return f"{a} and {b} around {c}"
    return None


def _source_word(word: str, home: dict[str, int]) -> str | None:
    """The source word (followed in `home`) that `word` is, if any."""
    if word in home:
        return word
    return next((w for w in home if same_word(word, w)), None)


def _polarity_changes(old: list[list[Token]], new: list[Token], sources: list[str]) -> list[str]:
    problems = []
    for polarity in Polarity:
        had = sum(1 for toks in old for t in toks if t.kind == "marker" and t.value == polarity)
        has = sum(1 for t in new if t.kind == "marker" and t.value == polarity)
        if had != has:
            problems.append(f"changes the number of “{polarity.value}” words ({had} → {has})")
    if problems:
        return problems
    for source, toks in zip(sources, old, strict=True):
        for marker in (t for t in toks if t.kind == "marker"):
            before, after = _neighbours(toks, marker, reach=2)
            homes = [t for t in new if t.kind == "marker" and t.value == marker.value]
            if not any(_kept_around(new, home, before, after) for home in homes):
                scope = " ".join([*before, "·", *after]) if before or after else "its clause"
                problems.append(
                    f"changes what a “{marker.value}” word applies to ({scope}) in {_quote(source)}"
                )
    return problems


def _quote(text: str) -> str:
    return "“" + (text if len(text) <= 50 else text[:49] + "…") + "”"


# "never ...", and prohibitions: "don't ...", "不要...", "しないで", "하지 마세요"
_PROHIBITION = re.compile(
    r"\b(?:never|nunca|jamás|jamas|nie|niemals|jamais|никогда|mai)\b"
    r"|^\W*(?:please\s+)?(?:don['’]t|do not|avoid|stop)\b|\bne\s+(?:jamais\s+)?\w+\s+pas\b"
    r"|从不|從不|决不|決不|決して|絶対|절대|不要|不准|别|別|禁止|ないで|지\s?마|말\s?것",
    re.IGNORECASE,
)


def is_instruction(text: str) -> bool:
    """Whether the text tells what must, always or never be done (any language covered)."""
    instructs = (Polarity.ALWAYS.value, Polarity.MUST.value)
    return bool(_PROHIBITION.search(text)) or any(
        t.kind == "marker" and t.value in instructs for t in tokens(text)
    )


__all__ = ["Polarity", "Token", "is_instruction", "meaning_changes", "same_word", "tokens"]
