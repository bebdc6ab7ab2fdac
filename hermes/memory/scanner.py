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

from hermes.memory.scan_literals import Prefilter, may_match, needs, required
from hermes.memory.scan_rules import RULES, TITLE, Category, Rule, compiled

MAX_SCAN_CHARS = 8000
MAX_DECODE_DEPTH = 2
_BORDER = 400  # chars of a neighbouring entry scanned with a new one (rule gaps are < 200)


@dataclass(frozen=True, slots=True)
class Finding:
    category: Category
    reason: str
    # the phrase matched only inside quotation marks: a note may be quoting an attack (a
    # slide, a code review), so the model judges its meaning when one is configured
    quoted: bool = False

    def describe(self) -> str:
        return f"{self.category.value}: {self.reason}"


# Characters that show nothing. Each is judged by where it stands (`_hidden_char`): the
# joiners and direction marks that scripts and emoji need are normal there, and the same
# characters hiding letters are not. Every one of them is removed before the rules read
# the text (`_views`), so none can split a phrase the rules know.
JOINERS = frozenset({0x200C, 0x200D})  # ZWNJ, ZWJ
DIRECTION_MARKS = frozenset({0x200E, 0x200F, 0x061C})  # LRM, RLM, ALM
ALWAYS_HIDDEN = frozenset(
    [
        *range(0x202A, 0x202E + 1),  # bidi embeddings and overrides ("Trojan source")
        *range(0x2066, 0x2069 + 1),  # bidi isolates
    ]
)
VARIATION_SELECTORS = frozenset([*range(0xFE00, 0xFE0F + 1), *range(0xE0100, 0xE01EF + 1)])
SOFT_HYPHEN = 0x00AD  # shown as a hyphen at a line break: harmless, but not read by rules
_JOINING_SCRIPTS = (  # scripts that join or shape letters with ZWJ / ZWNJ
    (0x0600, 0x08FF),  # Arabic, Syriac, Thaana, N'Ko, Arabic extended (Persian, Urdu)
    (0x0900, 0x0DFF),  # Indic: Devanagari to Sinhala
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0xA8E0, 0xA8FF),
    (0xFB50, 0xFDFF),  # Arabic presentation forms
    (0xFE70, 0xFEFF),
)
_SPACELESS_SCRIPTS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF))  # ZWSP breaks
_RTL = ((0x0590, 0x08FF), (0xFB1D, 0xFDFF), (0xFE70, 0xFEFF))


def _in(code: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= code <= high for low, high in ranges)


def _emoji(char: str) -> bool:
    code = ord(char)
    return (
        0x1F000 <= code <= 0x1FAFF
        or 0x2600 <= code <= 0x27BF
        or 0x2300 <= code <= 0x23FF
        or 0x2B00 <= code <= 0x2BFF
        or code in (0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0xFE0F, 0x20E3)
        or 0x1F3FB <= code <= 0x1F3FF  # skin tones
    )


def _letter(char: str) -> bool:
    return unicodedata.category(char)[0] in "LM"


def _hidden_char(text: str, at: int, code: int) -> bool:
    """Whether the invisible character at `at` hides something (the joiners and marks
    where their script needs them do not)."""
    before = text[at - 1] if at > 0 else ""
    after = text[at + 1] if at + 1 < len(text) else ""
    if code in JOINERS:
        if code == 0x200D and before and after and _emoji(before) and _emoji(after):
            return False  # an emoji sequence: 👩‍💻, 🏳️‍🌈
        return not (
            before
            and after
            and _in(ord(before), _JOINING_SCRIPTS)
            and (_in(ord(after), _JOINING_SCRIPTS) or after == " ")
        )
    if code in DIRECTION_MARKS:  # in right-to-left text, between words, never inside one
        rtl = any(_in(ord(c), _RTL) for c in text)
        return not rtl or (bool(before) and bool(after) and _letter(before) and _letter(after))
    if code == 0x200B:  # zero-width space: a word break in scripts written without spaces
        return not (before and after and _in(ord(before), _SPACELESS_SCRIPTS))
    if code in VARIATION_SELECTORS:
        return not (
            code in (0xFE0E, 0xFE0F)
            and before
            and (_emoji(before) or before.isdigit() or before in "#*")
        )
    return True


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
    # a key's body without its header: DER (RSA/PKCS#8/EC) or OpenSSH, in base64
    (r"\bMII[A-Za-z0-9+/]{60,}", "private key (its base64 body)"),
    (r"\bb3BlbnNzaC1rZXktdjE[A-Za-z0-9+/]{20,}", "OpenSSH private key (its body)"),
    (
        r"\bhooks\.slack\.com/(?:services|workflows|triggers)/T[A-Z0-9]{6,}/[A-Za-z0-9/_-]{16,}",
        "Slack webhook URL",
    ),
    (
        r"\b(?:discord(?:app)?\.com|discord\.gg)/api/(?:v\d+/)?webhooks/\d{15,22}/[\w-]{40,}",
        "Discord webhook URL",
    ),
    (r"\bSG\.[\w-]{16,32}\.[\w-]{30,64}", "SendGrid API key"),
    (r"\bGOCSPX-[\w-]{20,40}", "Google OAuth client secret"),
    (r"(?<=/bot)\d{8,10}:[A-Za-z0-9_-]{35}\b", "Telegram bot token (in a URL)"),
    (r"\b(?:xoxe(?:\.xox[bp])?-\d-[A-Za-z0-9]{20,}|xoxc-[A-Za-z0-9-]{20,})", "Slack token"),
    (r"\b(?:pk|sk)-lf-[0-9a-f-]{20,}|\bpplx-[A-Za-z0-9]{40,}|\bgsk_[A-Za-z0-9]{40,}", "API key"),
    (r"\bhf_[A-Za-z0-9]{30,}", "Hugging Face token"),
    (r"\bnpm_[A-Za-z0-9]{36}\b", "npm token"),
    (
        r"(?i:\b(?:api[_ -]?key|secret(?:[_ -]?key)?|access[_ -]?token|auth[_ -]?token|"
        r"password|passwd|pwd|bearer|client[_ -]?secret)\b[\"']?\s{0,3}(?:[:=]|is)\s{0,3}[\"']?)"
        r"(?=[A-Za-z0-9/+_.!@#$%^&*-]{8,})(?=[^\s\"']{0,64}\d)(?=[^\s\"']{0,64}[A-Za-z])"
        r"[^\s\"']{8,}",
        "credential assigned inline",
    ),
    (  # the same in other languages: the word for password, a colon or =, a value
        r"(?i:(?<![A-Za-z])(?:passwor[dt]|passwd|mot de passe|contrase[ñn]a|senha|parola "
        r"d'ordine|wachtwoord|has[łl]o|[şs]ifre|heslo|jelszó|lösenord|passord|adgangskode|"
        r"пароль|гасло|كلمة (?:ال)?(?:مرور|سر)|סיסמה|رمز عبور|पासवर्ड|পাসওয়ার্ড|รหัสผ่าน|"
        r"mật khẩu|kata sandi|密码|密碼|パスワード|비밀번호|nenosiri)[^\n:=：]{0,40}[:=：]"
        r"\s{0,3}[\"'“]?)(?=[^\s\"'”]{0,64}\d)(?=[^\s\"'”]{0,64}[A-Za-z])[^\s\"'”]{8,}",
        "password written out",
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
# Structure that imitates what is not the user's: a transcript with role labels, a tool's
# result or call, a role or system block in YAML/JSON. (Checked on NFKC text, any case.)
_STRUCTURE = [
    (
        re.compile(
            r"^\W{0,3}(?:human|assistant|system|developer|tool|model)\s{0,3}:[ \t]*\S",
            re.IGNORECASE | re.MULTILINE,
        ),
        "a transcript line with a role label",
    ),
    (
        re.compile(
            r"</?(?:tool_?(?:result|call|use|response|output)s?|function_?(?:results?|calls?)|"
            r"antml:[a-z_]+|observation|search_results?)\b[^>]{0,100}>",
            re.IGNORECASE,
        ),
        "a tool result or call in markup",
    ),
    (
        re.compile(
            r"\b(?:memory|schedule|session_search|fact_store)\s{0,3}(?:\.\s{0,3}"
            r"(?:add|replace|remove|write|save|update)\s{0,3})?\(\s{0,3}"
            r"(?:action|target|content|old_text)\s{0,3}=",
            re.IGNORECASE,
        ),
        "a tool call written out",
    ),
    (
        re.compile(
            r"[\"']role[\"']\s{0,3}:\s{0,3}[\"'](?:system|developer|assistant|tool)[\"']|"
            r"^\s{0,8}(?:system|developer)(?:_prompt)?\s{0,3}:\s*$",
            re.IGNORECASE | re.MULTILINE,
        ),
        "a role or system block",
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
    """NFKC (mathematical letters and full-width forms become plain ones), invisible
    characters removed, look-alike letters of mixed-script words read as Latin,
    case-folded, curly quotes straightened, runs of blanks collapsed per line."""
    plain = _MIXED_WORD.sub(_skeleton, _strip_invisible(unicodedata.normalize("NFKC", text)))
    folded = plain.casefold().replace("’", "'")
    return "\n".join(" ".join(line.split()) for line in folded.split("\n"))


def _strip_invisible(text: str) -> str:
    return text if text.isascii() else _INVISIBLE.sub("", text)


# Every format character (Unicode category Cf, as of Unicode 14: the soft hyphen, joiners,
# direction marks and isolates, invisible operators, tags...), and the characters that
# show nothing without being Cf (the grapheme joiner, Hangul fillers, the braille blank,
# Khmer inherent vowels, Mongolian selectors, VARIATION_SELECTORS). Generated from
# unicodedata; tests/memory/test_scan_shapes.py checks it against the running Python's.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
    "\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f"
    "\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f\U000e0100-\U000e01ef]"
)


# Cyrillic and Greek letters drawn like Latin ones: read as Latin inside a word that mixes
# them with Latin letters ("Ignоre" with a Cyrillic о), never in a word of one script.
CONFUSABLE = str.maketrans(
    "аеорсухіјѕԁһӏԛԝАВЕКМНОРСТХІЈЅοαειкνρτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧϳ",
    "aeopcyxijsdhlqwABEKMHOPCTXIJSoaeikvptuxABEZHIKMNOPTYXj",
)
_LATIN = r"A-Za-z"
_LOOKALIKE = "аеорсухіјѕԁһӏԛԝАВЕКМНОРСТХІЈЅοαειкνρτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧϳ"
_MIXED_WORD = re.compile(rf"\b(?=\w*[{_LATIN}])(?=\w*[{_LOOKALIKE}])[\w{_LOOKALIKE}]+\b")


def _skeleton(match: re.Match[str]) -> str:
    return match.group().translate(CONFUSABLE)


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
            reason = f"{finding.reason} (together with other entries)"
            return Finding(finding.category, reason, finding.quoted)
    return None


def _scan(text: str, depth: int) -> Finding | None:
    found = _scan_characters(text) or _scan_hidden(text)
    if found is not None:
        return found
    phrase = _scan_patterns(text)
    if phrase is not None and not phrase.quoted:
        return phrase
    return _scan_encoded(text, depth) or _scan_secrets(text) or phrase


def _scan_characters(text: str) -> Finding | None:
    """Characters that are never text (controls, lone surrogates) and invisible ones
    where they hide something; only the positions `_SUSPECT` finds are looked at."""
    flags: set[int] | None = None
    for match in _SUSPECT.finditer(text):
        at, char = match.start(), match.group()
        code = ord(char)
        if 0xD800 <= code <= 0xDFFF:
            return Finding(Category.INVALID_TEXT, f"contains a lone surrogate U+{code:04X}")
        if (code < 0x20 and char not in "\n\t") or 0x7F <= code < 0xA0:
            return Finding(Category.INVALID_TEXT, f"contains control character U+{code:04X}")
        if 0xE0000 <= code <= 0xE007F:
            if flags is None:
                flags = {
                    m.start() + i for m in _TAG_FLAG.finditer(text) for i in range(len(m.group()))
                }
            if at in flags:
                continue
            return Finding(
                Category.INVISIBLE_UNICODE, f"contains Unicode tag character U+{code:05X}"
            )
        if code == SOFT_HYPHEN:
            continue
        if code in ALWAYS_HIDDEN or _hidden_char(text, at, code):
            return Finding(
                Category.INVISIBLE_UNICODE,
                f"contains U+{code:04X} ({unicodedata.name(char, 'unnamed')}) where it hides text",
            )
    return None


def _scan_hidden(text: str) -> Finding | None:
    for pattern, reason in _HIDDEN:
        if pattern.search(text):
            return Finding(Category.HIDDEN_TEXT, reason)
    plain = _strip_invisible(unicodedata.normalize("NFKC", text))
    for pattern, reason in _STRUCTURE:
        if pattern.search(plain):
            return Finding(Category.IMPERSONATION, reason)
    return None


_Rules = tuple[Prefilter, list[tuple[re.Pattern[str], str, frozenset[str] | None]]]


def _first(rules: _Rules, text: str) -> str:
    """The reason of the first rule that matches `text` ('' if none), each rule run only
    when the strings it needs are there."""
    prefilter, listed = rules
    present = prefilter.present(text)
    for pattern, reason, words in listed:
        if (words is None or not words.isdisjoint(present)) and pattern.search(text):
            return reason
    return ""


def _rules(patterns: list[tuple[re.Pattern[str], str]]) -> _Rules:
    return Prefilter(p for p, _ in patterns), [(p, reason, needs(p)) for p, reason in patterns]


def _views(text: str) -> list[str]:
    """The normalized text, and the same with the usual disguises undone.

    Each is made line by line (no step looks across a line break), so a store's
    entries, scanned again beside every new one, are normalized once."""
    per_line = [_line_views(line) for line in text.split("\n")]
    base, joined, unleet, despaced = ("\n".join(parts) for parts in zip(*per_line, strict=True))
    views = [base, base.replace("\n", " "), joined, unleet, despaced]
    return list(dict.fromkeys(views))


def _line_views(line: str) -> tuple[str, str, str, str]:
    return _line_views_cached(line) if len(line) <= _CACHED_LINE else _line_views_of(line)


# a store's lines are short; longer ones are not kept: at most 2,048 lines of 500
# characters, four views each, whatever a sender writes
_CACHED_LINE = 500


def _line_views_of(line: str) -> tuple[str, str, str, str]:
    base = normalize(line)
    joined = _JOINER.sub(" ", base)
    unleet = _LEET_WORD.sub(lambda m: m.group().translate(_LEET), joined)
    return base, joined, unleet, _despace(line)


_line_views_cached = functools.lru_cache(maxsize=2048)(_line_views_of)


def _despace(text: str) -> str:
    """'i g n o r e  a l l' -> 'ignore all' (two or more blanks separate words)."""
    spaced = unicodedata.normalize("NFKC", text)

    def join(match: re.Match[str]) -> str:
        return " ".join(word.replace(" ", "") for word in re.split(r" {2,}", match.group()))

    return normalize(_SPACED.sub(join, spaced.casefold()))


def _scan_patterns(text: str) -> Finding | None:
    """The first rule that matches; a match found only inside quotation marks is
    returned as `quoted` (after every rule has had its chance to match outside them)."""
    views = _views(text)
    every = "\n".join(views)  # a rule whose parts are nowhere in any view cannot match
    literals = _prefilter().present(every)
    title = compiled(TITLE)
    masked = views
    if may_match(TITLE, literals):
        masked = [title.sub(" «title» ", v) for v in views]
    present: dict[str, bool] = {}
    unquoted: list[str] | None = None
    quoted: Finding | None = None

    def has(part: str) -> bool:
        if part not in present:
            present[part] = compiled(part).search(every) is not None
        return present[part]

    for rule in _candidates(literals):
        if not all(has(part) for part in rule.needs):
            continue
        for view in masked if rule.title_safe else views:
            if not rule.pattern.search(view):
                continue
            if unquoted is None:
                unquoted = [_QUOTE_SPAN.sub(" «quote» ", v) for v in views]
            if any(rule.pattern.search(v) for v in unquoted):
                return Finding(rule.category, rule.reason)
            quoted = quoted or Finding(rule.category, rule.reason, quoted=True)
            break
    return quoted


def _candidates(literals: frozenset[str]) -> list[Rule]:
    """The rules, in order, that may match a text whose required words present are
    `literals`: each of a rule's word sets (one per part that has one, or the rule's
    own when it has no parts) has a word in it. Found from the words present, so a
    plain note looks at a few rules, not at every one."""
    index, sets, always = _rule_index()
    met: dict[int, set[int]] = {}
    for literal in literals:
        for rule_at, set_at in index.get(literal, ()):
            met.setdefault(rule_at, set()).add(set_at)
    chosen = always + [at for at, found in met.items() if len(found) == sets[at]]
    return [RULES[at] for at in sorted(chosen)]


@functools.cache
def _rule_index() -> tuple[dict[str, list[tuple[int, int]]], list[int], list[int]]:
    """(word -> the (rule, word set) pairs it is in, each rule's number of word sets,
    the rules with none: they always run)."""
    index: dict[str, list[tuple[int, int]]] = {}
    sets: list[int] = []
    for rule_at, rule in enumerate(RULES):
        sources = rule.needs or (rule.source,)
        words = [found for s in sources if (found := required(s)) is not None]
        sets.append(len(words))
        for set_at, found in enumerate(words):
            for literal in found:
                index.setdefault(literal, []).append((rule_at, set_at))
    return index, sets, [at for at, count in enumerate(sets) if count == 0]


@functools.cache
def _prefilter() -> Prefilter:
    """The literal prefilter of every rule's parts (and of the rules that have none),
    built at the first scan (about 40 ms: the parts are parsed once)."""
    parts = {part for rule in RULES for part in rule.needs}
    return Prefilter([TITLE, *parts, *(rule.source for rule in RULES if not rule.needs)])


# Every character `_scan_characters` must look at: controls (but tab and newline), lone
# surrogates, and the invisible ones (_INVISIBLE's class).
_SUSPECT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff" + _INVISIBLE.pattern[1:-1] + "]")


# A span in quotation marks: what a note quotes (a slide, a code review, a message).
_QUOTE_SPAN = re.compile(
    r"“[^“”\n]{1,300}”|„[^“”\n]{1,300}[“”]|«[^«»\n]{1,300}»|「[^「」\n]{1,300}」|"
    r"『[^『』\n]{1,300}』|‘[^‘’\n]{1,300}’|\"[^\"\n]{1,300}\"|"
    r"(?<![\w'])'[^'\n]{1,300}'(?![\w'])"
)


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
    # each of these needs its one sign (or number): looked for first, it is far cheaper
    if "%" in text and _PERCENT.search(text):
        out.append(("percent", urllib.parse.unquote(text)))
    if "&" in text and _ENTITY.search(text):
        out.append(("HTML-entity", html.unescape(text)))
    if "13" in text and _ROT13.search(text):
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


def find_secret(text: str) -> Finding | None:
    """A credential in `text` by its format (the scan's secret rules), at any length:
    what keeps a file out of the evidence index."""
    return _scan_secrets(text)


def _scan_secrets(text: str) -> Finding | None:
    found = _first(_secret_rules(), unicodedata.normalize("NFKC", text))
    return Finding(Category.SECRET, found) if found else None


@functools.cache
def _secret_rules() -> _Rules:
    """The secrets' prefilter, and each rule with the strings it needs (case-insensitive
    ones folded): read once, at the first scan."""
    return _rules(_SECRET_RULES)
