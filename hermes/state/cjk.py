"""Chinese, Japanese and Korean text as searchable terms, without a dictionary.

These languages are written without spaces between words (Korean puts them between
phrases, with particles attached), so a word index sees a whole clause as one token.
Each run of CJK characters is decomposed into overlapping bigrams and single
characters, at index time (`index_terms`, called by SQLite through the `hermes_cjk`
function the engine registers on every connection, from the triggers that keep
`messages_cjk` in sync) and at query time (`query_terms`). A question shares bigrams with
the message that answers it even when the rest of the wording differs; a word of one or
two characters is one term; the ranking weighs each term by its IDF over the user's own
messages, so common characters (particles, 的, の) count for little and rare ones
(names, places, products) for much.

Chosen by measurement (bench/cjk_segmenters.py, bench/data/cjk_eval.json, the same plain
ranking for every candidate): recall_any@5 with bigrams 0.875 / 1.000 / 0.938 (Korean /
Chinese / Japanese) against Kiwi 0.875, jieba 0.938, SudachiPy 0.812; a dictionary
splits a question and its answer into different units more often than bigrams fail to
meet, and bigrams need no dependency and no dictionary download. The price is the
index: 1.1-1.7 terms per character against 0.25-0.6.
"""

from __future__ import annotations

import re
import unicodedata
from itertools import groupby

# Korean particles (longest first): dropped from the end of a query word, so "포트를"
# asks for 포트 (the index keeps every bigram, so nothing is lost on that side)
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
# Asking words and sentence endings of questions: they are in the question, never in the
# answer, so they only pull up other questions. One list per language, closed classes.
QUESTION_TERMS = frozenset(
    # Chinese: what, which, where, when, how many/much, who, why, how
    "什么 什麼 哪里 哪裡 哪儿 哪些 哪个 哪所 哪 几 幾 多少 多久 谁 誰 为什么 怎么 怎麼 吗 嗎 呢 么"
    # Japanese: what, when, where, which, how much, who, (question endings)
    " 何 なに なん いつ どこ どの どれ どう いくら 誰 だれ だっけ っけ ですか ますか か"
    # Korean: what, when, where, how many/much, who, which, (question endings)
    " 였지 했지 이었지 였더라 했더라 했어 했나 인가 일까 야 지".split()
)
# Closed-class words of one character (pronouns, demonstratives, particles, adverbs):
# looked up alone they match almost anything, so a question's own ones are left out
# (inside a bigram they still count: 我女 in 我女儿).
FUNCTION_CHARS = frozenset(
    "的了是在和与也都就很吧呢啊我你他她它这那个们把被说要会能有上下不没"  # Chinese
    "私僕君彼此其"  # Japanese (kana alone is never looked up)
    "그이저좀또더다안못잘꼭제내나너뭘걸게거것때"  # Korean
)
# a Korean question word begins its phrase, whatever ending follows: 언제야, 뭐였지, 몇으로
KOREAN_ASKING = (
    "뭐",
    "무엇",
    "무슨",
    "언제",
    "어디",
    "몇",
    "얼마",
    "누구",
    "어느",
    "어떤",
    "어떻게",
)


CJK_CLASS = (  # the characters of Korean, Chinese and Japanese words, for a regex class
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
)
# a word (CJK and Latin glued together are one), and the Latin/digit runs inside it;
# each word is tested in Python: lookaheads over a long unspaced CJK paragraph would
# rescan it from every position (quadratic)
_WORD = re.compile(r"[\w-]+")
_HAS_CJK = re.compile(f"[{CJK_CLASS}]")
_LATIN = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*[a-zA-Z0-9]|[a-zA-Z0-9]")
_EDGES = re.compile(r"^[\W_]+|[\W_]+$")


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


def _gram_char(char: str) -> bool:
    """CJK letters only: punctuation in those blocks (・, ー is kept) breaks a run."""
    return is_cjk(char) and (char.isalnum() or char == "ー")


def _is_han(char: str) -> bool:
    code = ord(char)
    return 0x3400 <= code <= 0x9FFF or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FA1F


def runs(text: str) -> list[str]:
    """The runs of CJK letters in `text` (normalized: NFKC, so half-width kana and
    compatibility forms meet their usual forms)."""
    normal = unicodedata.normalize("NFKC", text)
    return ["".join(chars) for key, chars in groupby(normal, key=_gram_char) if key]


def _grams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)]


def index_terms(text: str | None, scope: str | None = "") -> str:
    """Every bigram and every character of each CJK run, and the Latin or digit part of a
    word glued to one ("redis는", "GitLab에", "16GB"): the word index sees "redis는" as one
    token, so without this "redis" would not find it. Space-separated, '' when the text
    has no CJK: what `messages_cjk` indexes for a message.

    Each term is prefixed with the user's scope token ("s0123…数据"): a one-character
    term (我) occurs in a large share of all CJK messages, and FTS5 reads a term's whole
    posting list before intersecting it with the user's; prefixed, a lookup reads only
    that user's postings."""
    if not text or not any(is_cjk(char) for char in text):
        return ""
    terms: list[str] = []
    for run in runs(text):
        terms.extend(run)
        terms.extend(_grams(run))
    for word in _WORD.findall(unicodedata.normalize("NFKC", text)):
        latin = _LATIN.findall(word)
        if latin and _HAS_CJK.search(word):
            terms.extend(part.casefold() for part in latin)
    prefix = scope or ""
    return " ".join(prefix + term for term in terms)


def query_terms(run: str) -> list[str]:
    """The terms to look up for one CJK run of a question: its bigrams, its Chinese
    characters one by one (a one-character word: 车, 猫, 弟), a run of one character as
    itself; asking words and Korean particles left out."""
    run = _strip_particle(run)
    if run in QUESTION_TERMS or run.startswith(KOREAN_ASKING):
        return []
    if len(run) == 1:
        return [] if run in FUNCTION_CHARS else [run]
    terms = [gram for gram in _grams(run) if gram not in QUESTION_TERMS]
    terms += [
        char
        for char in run
        if _is_han(char) and char not in QUESTION_TERMS and char not in FUNCTION_CHARS
    ]
    return list(dict.fromkeys(terms))


def _is_hangul(word: str) -> bool:
    return all(0xAC00 <= ord(char) <= 0xD7AF for char in word)


def korean_words(text: str) -> list[str]:
    """The Korean words of a question (particles off, asking words out), 2+ syllables."""
    words = []
    for token in unicodedata.normalize("NFKC", text).split():
        word = _strip_particle(_EDGES.sub("", token))
        if len(word) >= 2 and _is_hangul(word) and not word.startswith(KOREAN_ASKING):
            words.append(word)
    return words


def whole_words(content: str, words: list[str]) -> list[str]:
    """Those of `words` that `content` has as a whole word (a particle may follow):
    포트 in "포트를 바꿨어", not in "포트폴리오" (its bigram is in both)."""
    present = {
        _strip_particle(_EDGES.sub("", token))
        for token in unicodedata.normalize("NFKC", content).split()
    }
    return [word for word in words if word in present]


def _strip_particle(word: str) -> str:
    for particle in KOREAN_PARTICLES:
        if word.endswith(particle) and len(word) - len(particle) >= 2:
            return word[: -len(particle)]
    return word


__all__ = [
    "KOREAN_PARTICLES",
    "index_terms",
    "is_cjk",
    "korean_words",
    "query_terms",
    "runs",
    "whole_words",
]
