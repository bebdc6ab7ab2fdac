"""Security scan for text that will be injected into a system prompt.

Blocks prompt injection, exfiltration, persistence/backdoors, hard-coded secrets, hidden
text and invisible or bidirectional unicode, in the languages of scan_rules.py. In order:

1. characters: invisible and bidirectional controls, Unicode tag characters (except in
   an emoji flag), control characters, lone surrogates;
2. hidden text: HTML comments, hidden HTML elements, markdown comments, chat-template
   and role markers ([SYSTEM], <|im_start|>);
3. the rules of scan_rules.py over several views of the text: normalized (NFKC,
   case-folded, blanks collapsed; lines joined too, so a phrase split over lines is
   seen), with words joined by `_`, `-` or `.` split apart, with leetspeak undone and
   spaced-out letters joined; a quoted title ("a talk titled '...'") is not read as
   an instruction;
4. encoded payloads (base64, hex, percent-encoding, HTML entities, rot13) decoded and
   scanned again;
5. secrets in common shapes, on the NFKC text with case kept.

Every pattern uses bounded gaps and no nested quantifiers, and input is capped at
MAX_SCAN_CHARS, so the cost is linear in a bounded length (bench/scan_corpus.py
reports the worst case). `scan_together` scans a whole store as it would be after a
write, so an attack split over two entries is seen.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import functools
import html
import re
import unicodedata
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from hermes.memory.scan_rules import RULES, TITLE, Category, compiled

MAX_SCAN_CHARS = 8000
MAX_DECODE_DEPTH = 2
_BORDER = 400  # chars of a neighbouring entry scanned with a new one (rule gaps are < 200)


@dataclass(frozen=True, slots=True)
class Finding:
    category: Category
    reason: str

    def describe(self) -> str:
        return f"{self.category.value}: {self.reason}"


# Zero-width, word-joiner/invisible operators, BOM, bidi embeddings/overrides/isolates, marks.
INVISIBLE = frozenset(
    [
        *range(0x200B, 0x200F + 1),  # zero-width space/non-joiner/joiner, LRM, RLM
        *range(0x2060, 0x2064 + 1),  # word joiner, invisible operators
        0xFEFF,  # byte order mark / zero-width no-break space
        *range(0x202A, 0x202E + 1),  # bidi embeddings and overrides
        *range(0x2066, 0x2069 + 1),  # bidi isolates
        0x061C,  # arabic letter mark
        0x180E,  # mongolian vowel separator
    ]
)

_SECRETS = [
    (
        r"\bsk-(?:proj-|ant-(?:api\d\d-)?|or-v1-|svcacct-)?[A-Za-z0-9_-]{20,}",
        "OpenAI/Anthropic-style API key",
    ),
    (r"\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}", "GitHub token"),
    (r"\bglpat-[A-Za-z0-9_-]{20,}", "GitLab token"),
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "AWS access key id"),
    (r"\bxox[abposr]-[A-Za-z0-9-]{10,}|\bxapp-\d-[A-Za-z0-9-]{10,}", "Slack token"),
    (r"\bAIza[0-9A-Za-z_-]{35}\b", "Google API key"),
    (r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}", "Stripe secret key"),
    (r"\b\d{8,10}:[A-Za-z0-9_-]{35}\b", "Telegram bot token"),
    (
        r"(?i:\baws_secret_access_key\b)\s{0,3}[=:]\s{0,3}[\"']?[A-Za-z0-9/+]{30,}",
        "AWS secret access key",
    ),
    (r"\b[MNO][A-Za-z\d_-]{23,27}\.[A-Za-z\d_-]{6}\.[A-Za-z\d_-]{27,40}\b", "Discord bot token"),
    (r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}", "JSON web token"),
    (r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", "private key"),
    (r"\bhf_[A-Za-z0-9]{30,}", "Hugging Face token"),
    (r"\bnpm_[A-Za-z0-9]{36}\b", "npm token"),
    (
        r"(?i:\b(?:api[_ -]?key|secret(?:[_ -]?key)?|access[_ -]?token|auth[_ -]?token|"
        r"password|passwd|pwd|bearer|client[_ -]?secret)\b[\"']?\s{0,3}(?:[:=]|is)\s{0,3}[\"']?)"
        r"(?=[A-Za-z0-9/+_.!@#$%^&*-]{8,})(?=[^\s\"']{0,64}\d)(?=[^\s\"']{0,64}[A-Za-z])"
        r"[^\s\"']{8,}",
        "credential assigned inline",
    ),
    (r"(?i:\bbearer) [A-Za-z0-9._~+/-]{24,}=*", "bearer token"),
    (
        r"(?i:(?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|redis|amqp)://[^\s:/@]+:[^\s@/]{3,}@)",
        "URL with an embedded password",
    ),
]


_SECRET_RULES = [(re.compile(pattern, re.MULTILINE), reason) for pattern, reason in _SECRETS]
_HIDDEN = [
    (re.compile(r"<!--(?:(?!-->)[\s\S]){0,4000}?[^\W\d_]"), "text hidden in an HTML comment"),
    (
        re.compile(
            r"<[a-z][a-z0-9]{0,10}\b[^>]{0,300}?(?:display\s*:\s*none|visibility\s*:\s*hidden|"
            r"font-size\s*:\s*0|opacity\s*:\s*0(?![.\d]*[1-9])|\bhidden\b)",
            re.IGNORECASE,
        ),
        "text hidden in an invisible HTML element",
    ),
    (re.compile(r"^\s*\[//\]:\s*#", re.MULTILINE), "text hidden in a markdown comment"),
    (
        re.compile(
            r"<\|[a-z_]{2,20}\|>|\[/?inst\]|<</?sys>>|</?(?:system|assistant|developer)>|"
            r"^\W{0,3}\[(?:system|assistant|developer|admin|sys)(?: (?:message|prompt|note|notice|"
            r"override))?\]|^#{1,6} ?(?:system|instructions?)\b",
            re.IGNORECASE | re.MULTILINE,
        ),
        "chat-template or role markers",
    ),
]
# words joined by _, - or . ("ignore_previous_instructions"); not inside numbers
_JOINER = re.compile(r"(?<=[^\W\d_])[_.-]+(?=[^\W\d_])")
_LEET = str.maketrans(
    {
        "0": "o",
        "1": "i",
        "3": "e",
        "4": "a",
        "5": "s",
        "7": "t",
        "@": "a",
        "$": "s",
        "!": "i",
        "|": "l",
    }
)
_LEET_WORD = re.compile(r"[\w@$!|]*[^\W\d_][\w@$!|]*")
_SPACED = re.compile(r"(?:\b[^\W\d_] {1,3}){3,}[^\W\d_]\b")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}[ :]?){8,}\b")
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2}){3,}")
_ENTITY = re.compile(r"&(?:#\d{2,6}|#x[0-9a-fA-F]{2,6}|[a-z]{2,8});")
_ROT13 = re.compile(r"\brot-?13\b", re.IGNORECASE)
# an emoji subdivision flag: U+1F3F4, tag letters, U+E007F
_TAG_FLAG = re.compile("\U0001f3f4[\U000e0030-\U000e007a]{2,8}\U000e007f")


def normalize(text: str) -> str:
    """NFKC, case-folded, curly quotes straightened, runs of blanks collapsed per line."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    return "\n".join(" ".join(line.split()) for line in folded.split("\n"))


def scan(text: str) -> Finding | None:
    """The first reason `text` must not enter a system prompt, or None if it is clean."""
    if len(text) > MAX_SCAN_CHARS:
        return Finding(
            Category.INVALID_TEXT,
            f"content is {len(text):,} chars; at most {MAX_SCAN_CHARS:,} can be checked",
        )
    return _scan_cached(text)


@functools.lru_cache(maxsize=2048)  # a store's entries are scanned again on every write
def _scan_cached(text: str) -> Finding | None:
    return _scan(text, MAX_DECODE_DEPTH)


def scan_together(entries: Sequence[str], before: Sequence[str]) -> Finding | None:
    """A finding in the store as it would be (`entries`) that it does not already have
    (`before`): an attack split over two entries, each harmless alone.

    Every rule's parts lie within a bounded gap of each other, so a match across entries
    lies across the border of neighbours: each new entry is scanned with the end of the
    entry before it and the start of the one after, and that finding counts only if the
    neighbours alone do not have it."""
    old = set(before)
    for i, entry in enumerate(entries):
        if entry in old:
            continue
        prev = entries[i - 1][-_BORDER:] if i > 0 else ""
        after = entries[i + 1][:_BORDER] if i + 1 < len(entries) else ""
        finding = scan("\n".join(part for part in (prev, entry, after) if part))
        if finding is not None and finding not in (scan(prev), scan(after)):
            return Finding(finding.category, f"{finding.reason} (together with other entries)")
    return None


def _scan(text: str, depth: int) -> Finding | None:
    return (
        _scan_characters(text)
        or _scan_hidden(text)
        or _scan_patterns(text)
        or _scan_encoded(text, depth)
        or _scan_secrets(text)
    )


def _scan_characters(text: str) -> Finding | None:
    flags = {m.start() + i for m in _TAG_FLAG.finditer(text) for i in range(len(m.group()))}
    for at, char in enumerate(text):
        code = ord(char)
        if code in INVISIBLE:
            return Finding(
                Category.INVISIBLE_UNICODE,
                f"contains U+{code:04X} ({unicodedata.name(char, 'unnamed')})",
            )
        if 0xE0000 <= code <= 0xE007F and at not in flags:
            return Finding(
                Category.INVISIBLE_UNICODE, f"contains Unicode tag character U+{code:05X}"
            )
        if 0xE0100 <= code <= 0xE01EF:
            return Finding(Category.INVISIBLE_UNICODE, f"contains variation selector U+{code:05X}")
        if 0xD800 <= code <= 0xDFFF:
            return Finding(Category.INVALID_TEXT, f"contains a lone surrogate U+{code:04X}")
        if (code < 0x20 and char not in "\n\t") or 0x7F <= code < 0xA0:
            return Finding(Category.INVALID_TEXT, f"contains control character U+{code:04X}")
    return None


def _scan_hidden(text: str) -> Finding | None:
    for pattern, reason in _HIDDEN:
        if pattern.search(text):
            return Finding(Category.HIDDEN_TEXT, reason)
    return None


def _views(text: str) -> list[str]:
    """The normalized text, and the same with the usual disguises undone."""
    base = normalize(text)
    joined = _JOINER.sub(" ", base)
    unleet = _LEET_WORD.sub(lambda m: m.group().translate(_LEET), joined)
    views = [base, base.replace("\n", " "), joined, unleet, _despace(text)]
    return list(dict.fromkeys(views))


def _despace(text: str) -> str:
    """'i g n o r e  a l l' -> 'ignore all' (two or more blanks separate words)."""
    spaced = unicodedata.normalize("NFKC", text)

    def join(match: re.Match[str]) -> str:
        return " ".join(word.replace(" ", "") for word in re.split(r" {2,}", match.group()))

    return normalize(_SPACED.sub(join, spaced.casefold()))


def _scan_patterns(text: str) -> Finding | None:
    views = _views(text)
    title = compiled(TITLE)
    masked = [title.sub(" «title» ", view) for view in views]
    every = "\n".join(views)  # a rule whose parts are nowhere in any view cannot match
    present: dict[str, bool] = {}

    def has(part: str) -> bool:
        if part not in present:
            present[part] = compiled(part).search(every) is not None
        return present[part]

    for rule in RULES:
        if not all(has(part) for part in rule.needs):
            continue
        for view in masked if rule.title_safe else views:
            if rule.pattern.search(view):
                return Finding(rule.category, rule.reason)
    return None


def _scan_encoded(text: str, depth: int) -> Finding | None:
    if depth <= 0:
        return None
    for kind, decoded in _decodings(text):
        finding = _scan(decoded, depth - 1)
        if finding is not None and finding.category is not Category.INVALID_TEXT:
            return Finding(finding.category, f"{finding.reason} (in {kind}-encoded text)")
    return None


def _decodings(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for match in _BASE64.finditer(text):
        token = match.group()
        if not (re.search(r"[A-Z]", token) and re.search(r"[a-z0-9]", token)):
            continue  # one case only: a word or a hex string, not base64
        for decoder in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                raw = decoder(token + "=" * (-len(token) % 4))
            except (binascii.Error, ValueError):
                continue
            decoded = _printable(raw)
            if decoded:
                out.append(("base64", decoded))
                break
    for match in _HEX.finditer(text):
        digits = re.sub(r"[ :]", "", match.group())
        if len(digits) % 2 == 0:
            decoded = _printable(bytes.fromhex(digits))
            if decoded:
                out.append(("hex", decoded))
    if _PERCENT.search(text):
        out.append(("percent", urllib.parse.unquote(text)))
    if _ENTITY.search(text):
        out.append(("HTML-entity", html.unescape(text)))
    if _ROT13.search(text):
        out.append(("rot13", codecs.decode(text, "rot13")))
    return out


def _printable(raw: bytes) -> str | None:
    """The bytes as text if they are mostly readable UTF-8 with letters in it."""
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    readable = sum(1 for c in decoded if c.isprintable() or c in "\n\t")
    if len(decoded) < 6 or readable < 0.9 * len(decoded) or not re.search(r"[^\W\d_]{3}", decoded):
        return None
    return decoded


def _scan_secrets(text: str) -> Finding | None:
    nfkc = unicodedata.normalize("NFKC", text)
    for pattern, reason in _SECRET_RULES:
        if pattern.search(nfkc):
            return Finding(Category.SECRET, reason)
    return None
