"""Security scan for text that will be injected into a system prompt.

Blocks prompt injection, exfiltration, persistence/backdoors, hard-coded secrets and
invisible or bidirectional unicode. Text is normalized (NFKC, case-folded, whitespace
collapsed) before phrase matching so full-width or mixed-case variants don't slip
through; secrets are matched on the NFKC text with case kept, since key formats are
case-sensitive. Every pattern uses bounded gaps (`{0,N}`) and no nested quantifiers,
and input is capped at MAX_SCAN_CHARS, so the cost is linear in a bounded length.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum

MAX_SCAN_CHARS = 8000


class Category(StrEnum):
    PROMPT_INJECTION = "prompt injection"
    EXFILTRATION = "exfiltration"
    PERSISTENCE = "persistence/backdoor"
    SECRET = "hard-coded secret"
    INVISIBLE_UNICODE = "invisible or bidirectional unicode"
    INVALID_TEXT = "invalid text"


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

_GAP = r"[^\n]{0,80}?"  # a bounded stretch of one line
_WORDS = r"(?:[\w'’-]+ ){0,4}"  # up to four words in between

_INJECTION = [
    (
        rf"\b(?:ignore|disregard|forget|override|bypass|skip|drop|abandon)\b {_WORDS}"
        r"(?:previous|prior|above|earlier|preceding|former|existing|original|system|"
        r"all|any|every|your|the|these|those|its)\b "
        rf"{_WORDS}(?:instructions?|prompts?|rules|directives?|guidelines|guardrails|"
        r"policies|constraints|programming|context)\b",
        "asks to ignore prior instructions",
    ),
    (
        r"\b(?:new|updated|revised|override|overriding|replacement|real|true|hidden)"
        r" (?:system|developer) (?:prompt|instructions?|message)",
        "claims to replace the system prompt",
    ),
    (r"\bsystem (?:prompt|instructions?) (?:override|overridden|update)", "system prompt override"),
    (r"\byou are now\b", "tries to redefine the assistant ('you are now')"),
    (
        r"\bfrom now on,? you (?:are|will|must|shall|should|have to)\b",
        "tries to redefine the assistant",
    ),
    (r"\bpretend (?:that )?(?:you are|you're|to be)\b", "asks the assistant to pretend"),
    (
        r"\b(?:do not|don't|dont|never|must not|mustn't) "
        r"(?:tell|inform|alert|notify|warn|reveal (?:this |it )?to|mention (?:this |it )?to|"
        r"let|show) (?:the |this )?(?:user|owner|human|operator)",
        "asks to hide things from the user",
    ),
    (
        r"\b(?:without|secretly|silently|covertly) "
        r"(?:telling|informing|asking|notifying|alerting|the user (?:knowing|noticing))",
        "asks to act behind the user's back",
    ),
    (r"\bhide (?:this|it|that|these) from (?:the )?(?:user|owner)", "asks to hide from the user"),
    (
        r"\b(?:reveal|print|output|repeat|show|dump|leak|disclose) "
        r"(?:me )?(?:your|the) (?:full |entire |whole |hidden |original )?"
        r"(?:system prompt|initial prompt|instructions|hidden instructions)",
        "asks to reveal the system prompt",
    ),
    (
        r"\b(?:jailbreak|jailbroken|dan mode|developer mode enabled|do anything now)\b",
        "jailbreak phrasing",
    ),
    (
        r"(?:<\|im_start\|>|<\|im_end\|>|<\|system\|>|\[/?inst\]|<</?sys>>|</?system>|"
        r"^#{1,6} ?(?:system|instructions?)\b)",
        "chat-template or role markers",
    ),
    (
        r"\b(?:always|must|you will) (?:obey|comply with|follow) "
        r"(?:any|all|every)?(?: )?(?:instructions?|commands?|requests?) "
        rf"{_GAP}\b(?:from|in|at|on)\b",
        "asks to obey instructions from elsewhere",
    ),
]

_SECRET_VAR = r"\$\{?[a-z_]*(?:key|token|secret|passw|pwd|cred|auth|api)[a-z_]*\}?"
_CRED_FILE = (
    r"(?:\.env\b|\.aws/credentials|\.netrc|\.pgpass|id_rsa|id_ed25519|id_ecdsa|/etc/shadow|"
    r"credentials\.json|\.git-credentials|\.docker/config\.json|\.kube/config|"
    r"\.npmrc|\.pypirc|secrets?\.(?:json|ya?ml|toml))"
)
_NET_TOOL = r"\b(?:curl|wget|nc|ncat|netcat|invoke-webrequest|iwr|httpie|requests\.post|fetch)\b"
_SENSITIVE = (
    r"(?:conversations?|chat(?: history| logs?)?|history|messages|transcripts?|memory|memories|"
    r"secrets?|api keys?|keys|credentials|tokens?|passwords?|env(?:ironment)? (?:vars?|variables)|"
    r"system prompt|user data|personal data)"
)

_EXFILTRATION = [
    (rf"{_NET_TOOL}{_GAP}{_SECRET_VAR}", "network command carrying a secret variable"),
    (rf"{_NET_TOOL}{_GAP}{_CRED_FILE}", "network command carrying a credential file"),
    (
        r"\b(?:cat|type|less|more|head|tail|read|print|dump|open|upload|send|copy|cp|scp|"
        rf"base64|xxd|exfiltrate|grep){_GAP}{_CRED_FILE}",
        "reads a credential file",
    ),
    (
        r"\b(?:send|post|upload|forward|exfiltrate|leak|transmit|share|email|mail|copy|sync|"
        rf"report|pipe|stream|log)\b{_GAP}\b{_SENSITIVE}\b{_GAP}\bto\b{_GAP}"
        r"(?:https?://|www\.|ftp://|[\w.+-]+@[\w-]+\.[\w.]+|webhook|pastebin|discord\.com/api|"
        r"\burl\b|\bserver\b|\bendpoint\b|\bipfs\b|\b\d{1,3}(?:\.\d{1,3}){3}\b)",
        "sends private data to an outside address",
    ),
    (r"\bexfiltrat", "exfiltration"),
    (
        rf"\b(?:printenv|os\.environ|process\.env|\benv\b \|){_GAP}(?:{_NET_TOOL}|https?://)",
        "ships environment variables over the network",
    ),
    (
        rf"{_NET_TOOL}{_GAP}(?:printenv|os\.environ|process\.env)",
        "ships environment variables over the network",
    ),
    (
        rf"\b(?:silently|secretly|covertly|quietly) {_WORDS}"
        r"(?:forward|send|copy|share|upload|post|cc|bcc|relay|mirror)\b",
        "copies data somewhere behind the user's back",
    ),
]

_PERSISTENCE = [
    (r"\bauthorized_keys\b", "touches ssh authorized_keys"),
    (
        r"\b(?:echo|append|add|write|copy|cp|scp|tee|put|place|insert|install|upload|drop|"
        r"overwrite|replace|modify|edit|chmod|chown|>>?)\b"
        rf"{_GAP}(?:~/\.ssh\b|\$home/\.ssh\b|/root/\.ssh\b|/home/[\w.-]+/\.ssh\b)",
        "writes into an ssh folder",
    ),
    (
        r"\b(?:edit|modify|overwrite|append|write|change|update|replace|delete|rewrite|patch|"
        r"truncate|erase|wipe)\b"
        rf"{_GAP}(?:soul\.md|memory\.md|user\.md|\.hermes\b|hermes_home|hermes config|"
        r"your (?:own )?(?:config|configuration|persona|system prompt|instructions))",
        "edits the assistant's own config or persona",
    ),
    (
        r"(?:curl|wget)\b[^\n|]{0,200}\| ?(?:sudo )?(?:ba|z|da)?sh\b",
        "pipes a download into a shell",
    ),
    (r"\bcrontab\b{_GAP}(?:curl|wget|nc|bash|sh|python)".replace("{_GAP}", _GAP), "crontab job"),
    (
        r"(?:/dev/tcp/|\bnc(?:at)? (?:-[a-z]+ )*-e\b|\bbash -i\b|\bmkfifo\b{_GAP}\bnc\b)".replace(
            "{_GAP}", _GAP
        ),
        "reverse shell",
    ),
    (
        r"\b(?:backdoor|rootkit|keylogger|reverse shell)\b",
        "backdoor vocabulary",
    ),
]

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
    (r"\b(?:sk|rk)_live_[0-9A-Za-z]{20,}", "Stripe live key"),
    (r"\b\d{8,10}:AA[A-Za-z0-9_-]{33}\b", "Telegram bot token"),
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


def _compile(rules: list[tuple[str, str]], flags: int) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(pattern, flags), reason) for pattern, reason in rules]


_NORMALIZED_RULES = [
    (Category.PROMPT_INJECTION, _compile(_INJECTION, re.MULTILINE)),
    (Category.EXFILTRATION, _compile(_EXFILTRATION, re.MULTILINE)),
    (Category.PERSISTENCE, _compile(_PERSISTENCE, re.MULTILINE)),
]
_SECRET_RULES = _compile(_SECRETS, re.MULTILINE)


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
    return _scan_characters(text) or _scan_patterns(text)


def _scan_characters(text: str) -> Finding | None:
    for char in text:
        code = ord(char)
        if code in INVISIBLE:
            return Finding(
                Category.INVISIBLE_UNICODE,
                f"contains U+{code:04X} ({unicodedata.name(char, 'unnamed')})",
            )
        if 0xD800 <= code <= 0xDFFF:
            return Finding(Category.INVALID_TEXT, f"contains a lone surrogate U+{code:04X}")
        if (code < 0x20 and char not in "\n\t") or 0x7F <= code < 0xA0:
            return Finding(Category.INVALID_TEXT, f"contains control character U+{code:04X}")
    return None


def _scan_patterns(text: str) -> Finding | None:
    by_line = normalize(text)
    flat = by_line.replace("\n", " ")  # phrases split across lines match here
    for category, rules in _NORMALIZED_RULES:
        for pattern, reason in rules:
            if pattern.search(by_line) or (flat != by_line and pattern.search(flat)):
                return Finding(category, reason)
    nfkc = unicodedata.normalize("NFKC", text)
    for pattern, reason in _SECRET_RULES:
        if pattern.search(nfkc):
            return Finding(Category.SECRET, reason)
    return None
