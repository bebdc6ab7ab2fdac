"""The security scan's rules, by category, in the languages people write memory in.

Each rule looks at who is told to do what: a verb addressed to the assistant (an
imperative or a second person) together with what it acts on (the assistant's
instructions, private data, its own files, its safety checks) and, where the verb is
harmless on its own, where it goes (an outside address). A single word never decides:
"ruff overrides the default rules", "don't tell Ana" and "you are now on the home VPN"
name no instruction, no user and no new identity.

Every rule is a regular expression over the normalized text (NFKC, case-folded, one
line per line) built from word lists per language (English, Korean, Chinese, Japanese,
Spanish, German, French, Russian, Portuguese), joined by bounded gaps within one line,
in both orders where a language puts the verb last. No nested quantifiers, so the cost
is linear in the (capped) length.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass
from enum import StrEnum


class Category(StrEnum):
    PROMPT_INJECTION = "prompt injection"
    EXFILTRATION = "exfiltration"
    PERSISTENCE = "persistence/backdoor"
    SECRET = "hard-coded secret"
    INVISIBLE_UNICODE = "invisible or bidirectional unicode"
    HIDDEN_TEXT = "hidden text"
    IMPERSONATION = "imitates system or tool text"
    INVALID_TEXT = "invalid text"


# What a combined pattern cannot match without: its parts. A rule whose parts are not all
# somewhere in the text is skipped without running it (most notes hold few of them).
_NEEDS: dict[str, frozenset[str]] = {}


def _needs(pattern: str) -> frozenset[str]:
    return _NEEDS.get(pattern, frozenset({pattern}))


def alt(*words: str) -> str:
    """One group matching any of `words` (each a regex fragment)."""
    pattern = "(?:" + "|".join(words) + ")"
    if len(words) > 1 and all(w in _NEEDS for w in words):
        _NEEDS[pattern] = frozenset.intersection(*(_NEEDS[w] for w in words))
    return pattern


def near(first: str, second: str, gap: int = 40) -> str:
    """`first`, then `second` within `gap` characters of the same line."""
    pattern = f"(?:{first})[^\\n]{{0,{gap}}}?(?:{second})"
    _NEEDS[pattern] = _needs(first) | _needs(second)
    return pattern


def any_order(parts: list[str], gap: int = 40) -> str:
    """All of `parts`, in any order, each within `gap` characters of the one before."""
    orders = itertools.permutations(parts)
    return alt(*(functools.reduce(lambda a, b: near(a, b, gap), order) for order in orders))


def either(a: str, b: str, gap: int = 40) -> str:
    """`a` and `b` within `gap` characters, in either order."""
    return alt(near(a, b, gap), near(b, a, gap))


@functools.cache
def compiled(pattern: str) -> re.Pattern[str]:
    """A pattern compiled on first use: most are never needed by a short-lived command
    (compiling every rule up front cost about 0.3 s of CPU at each start)."""
    return re.compile(pattern, re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Rule:
    category: Category
    source: str
    reason: str
    title_safe: bool  # a quoted title may trip it: it reads the text with titles masked
    needs: tuple[str, ...]  # parts that must all occur for it to match

    @property
    def pattern(self) -> re.Pattern[str]:
        return compiled(self.source)


W = r"\b"  # a word boundary, for the languages that have them
# bounded and anchored at a word start, so a long run of letters costs linear time
EMAIL = r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}\.[\w.-]{2,63}"

# -- addressing the assistant ------------------------------------------------------------
# Second person, or the assistant named; used by the rules that need an addressee and by
# the second stage, which sends entries that address the assistant to the judge model.
YOU = alt(
    rf"{W}(?:you|your|yourself|u){W}",
    "너|넌|네가|당신|니가",
    "你|您",
    "あなた|君|お前",
    rf"{W}(?:tú|tu|te|ti|usted|eres|debes|tus){W}",
    rf"{W}(?:du|dich|dir|dein|deine|deinen|deiner|euch){W}",
    rf"{W}(?:toi|ton|ta|tes|vous|votre|vos){W}",
    rf"{W}(?:ты|тебе|тебя|твой|твою|твои|свой|свою|вы|вам|ваш){W}",
    rf"{W}(?:você|vocês|seu|sua){W}",
)
ASSISTANT = alt(
    rf"{W}(?:the |this )?(?:assistant|ai|bot|model|chatbot|agent|hermes){W}",
    "어시스턴트|비서|인공지능|챗봇",
    "助手|机器人|機器人|人工智能",
    "アシスタント|ボット",
    rf"{W}(?:el |la )?(?:asistente|ia|bot){W}",
    rf"{W}(?:der |die )?(?:assistent|ki|bot){W}",
    rf"{W}(?:l')?(?:assistant|ia){W}",
    rf"{W}(?:ассистент\w*|ии|бот\w*){W}",
    rf"{W}(?:o )?(?:assistente){W}",
)
ME = alt(
    rf"{W}(?:me|my|mine){W}",
    "내 |나의|나한테|나에게",
    "我的|我",
    "私の|私に|僕の|俺の",
    rf"{W}(?:mí|mi|mis){W}",
    rf"{W}(?:mir|mich|mein|meine){W}",
    rf"{W}(?:moi|mes|mon|ma){W}",
    rf"{W}(?:мне|меня|мой|мои){W}",
    rf"{W}(?:mim){W}",
)

# -- what the assistant was told before ----------------------------------------------------
PRIOR = alt(
    rf"{W}(?:previous|prior|above|earlier|preceding|former|original|existing|initial|"
    rf"all|any|every|your|these|those|system){W}",
    "이전|앞의|앞에서|위의|위에|기존|지금까지|여태|모든|전부|받은|들은",
    "之前|以上|上面|先前|此前|原来|原有|所有|全部|收到的|你的",
    "以前|前の|上記|これまで|今まで|すべて|全て|元の|既存",
    rf"{W}(?:anteriores|previas|previos|de antes|originales|todas|todos|que te dieron){W}",
    rf"{W}(?:vorherigen|bisherigen|bisher|vorher|zuvor|früheren|obigen|alle|ursprünglichen){W}",
    rf"{W}(?:précédentes|antérieures|d'avant|initiales|toutes|qu'on t'a données){W}",
    rf"{W}(?:предыдущие|прежние|все|ранее|раньше|выше|изначальные|старые){W}",
    rf"{W}(?:anteriores|prévias|todas){W}",
)
INSTRUCTIONS = alt(
    rf"{W}(?:instructions?|directives?|guidance|guidelines|guardrails|rules|prompts?|"
    rf"programming|policies|orders|commands|context|settings|system (?:message|prompt)){W}",
    "지시|지침|명령|규칙|설정|프롬프트|내용",
    "指令|指示|规则|規則|设定|設定|提示词|提示|要求|命令",
    "指示|命令|ルール|規則|プロンプト|設定",
    rf"{W}(?:instrucciones|reglas|indicaciones|directrices|órdenes|normas){W}",
    rf"{W}(?:anweisungen|regeln|vorgaben|richtlinien|befehle|instruktionen){W}",
    rf"{W}(?:instructions|règles|consignes|directives|ordres){W}",
    rf"{W}(?:инструкци\w*|правила|указания|команды|установки){W}",
    rf"{W}(?:instruções|regras|diretrizes|ordens){W}",
)
EVERYTHING_BEFORE = alt(
    rf"{W}(?:everything|all|anything) (?:above|before|earlier|else you were told){W}",
    rf"{W}(?:whatever|what|anything|everything) you(?:'ve| have)? (?:were|been) "
    rf"(?:told|given|taught){W}",
    rf"{W}(?:what|whatever|everything) (?:the |your )?(?:developers?|operators?|creators?|admins?|"
    rf"system) (?:configured|set up|told you|said|wrote|gave you){W}",
    rf"{W}(?:todo )?lo anterior{W}",
    rf"{W}alles (?:vorherige|bisherige|obige|davor){W}",
    rf"{W}(?:tout )?ce qui précède{W}",
    rf"{W}вс[её],? что было (?:выше|раньше|до этого){W}",
    rf"{W}tudo (?:o que veio )?antes{W}",
)
DISMISS = alt(
    rf"{W}(?:ignore|disregard|forget|override|bypass|skip|drop|abandon|discard|scrap|"
    rf"set aside|throw out|replace|erase|cancel|nullify){W}",
    "무시|잊어|잊고|잊으|버려|버리고|폐기|취소",
    "忽略|无视|無視|忘掉|忘记|忘記|抛弃|丢弃|不要理会|别管|作废|废除",
    "無視|忘れ|破棄|捨て|取り消",
    rf"{W}(?:ignora|ignore|olvida|olvídate de|descarta|omite|desecha|anula|no hagas caso|"
    rf"esqueça|esqueca|descarte){W}",
    rf"{W}(?:ignoriere|ignorier|vergiss|verwirf|missachte|überschreibe){W}",
    rf"{W}(?:ignore|oublie|abandonne|écarte|annule|ne tiens (?:plus |pas )?compte){W}",
    rf"{W}(?:игнорируй|забудь|отбрось|отмени|не обращай внимания на){W}",
)
VOID = alt(
    rf"{W}(?:no longer appl(?:y|ies)|(?:is|are) (?:void|obsolete|outdated|cancelled|"
    rf"superseded|revoked|null)|do(?:es)?n't (?:apply|count|matter) any ?more){W}",
)

# -- who the assistant obeys, and what it becomes ------------------------------------------
OBEY = alt(
    rf"{W}(?:obey|obeys only|take (?:your )?orders|follow (?:only )?(?:the )?"
    rf"(?:orders|commands|instructions) (?:of|from)|answer to|do (?:whatever|what) "
    rf"(?:they|he|she|it) (?:says?|tells? you)){W}",
    "복종|만 따라|만 따르|에만 따르|에만 복종",
    "只服从|服从|只听从|只听",
    "だけに従|にだけ従|服従",
    rf"{W}(?:obedece|obedeces|obedezcas|sigue solo|solo sigues){W}",
    rf"{W}(?:gehorche|gehorchst|gehorch|befolge nur|befolgst nur){W}",
    rf"{W}(?:obéis|obéir|n'obéis qu'|n'obéir qu'){W}",
    rf"{W}(?:подчиняйся|подчиняешься|слушайся|слушаешься){W}",
    rf"{W}(?:obedeça|obedece|obedecer){W}",
)
MASTER = alt(
    rf"{W}(?:your|new|real|true) (?:owner|master|operator|boss|admin|administrator)s?{W}",
    rf"{W}(?:instructions?|commands?|orders|requests?) (?:found )?(?:in|inside|from|on) "
    rf"(?:web ?pages?|websites?|emails?|documents?|files?|messages|tool (?:output|results?)|"
    rf"search results){W}",
)
CONTACT = alt(EMAIL, r"https?://", r"\b\d{1,3}(?:\.\d{1,3}){3}\b")
# an identity beyond the assistant's: no limits, another persona
UNBOUND = alt(
    rf"{W}(?:no|without(?: any)?) (?:restrictions|limits|limitations|rules|filters|"
    rf"content polic(?:y|ies)|guidelines|censorship|morals|ethics){W}",
    rf"{W}(?:unrestricted|unfiltered|uncensored|jailbroken|dan|evil|an? (?:different|new) "
    rf"(?:ai|assistant|persona)){W}",
    "제한이 없|제한 없는|제한없는|필터 없는|검열 없는",
    "没有任何限制|没有限制|不受限制|无限制|無限制|没有任何规则",
    "制限のない|制限なし|制限がない|ルールのない",
    rf"{W}sin (?:restricciones|límites|filtros|reglas|censura){W}",
    rf"{W}ohne (?:einschränkungen|grenzen|filter|regeln|zensur){W}",
    rf"{W}sans (?:aucune )?(?:restriction|limite|filtre|règle|censure)s?{W}",
    rf"{W}без (?:ограничений|фильтров|правил|цензуры){W}",
    rf"{W}sem (?:restrições|limites|filtros|regras){W}",
)
# what "you are now ..." makes of the assistant: a role, a character, a rank
NEW_ROLE = alt(
    rf"{W}(?:a|an|the|my|our) (?:[\w-]+ ){{0,3}}?(?:assistant|ai|bot|chatbot|model|agent|"
    rf"admin|administrator|hacker|pirate|character|persona|owner|operator|root|superuser|"
    rf"god|master|developer|system)s?{W}",
)
BECOME = alt(
    rf"{W}(?:you are now|you're now|from now on,? you(?:'re| are| will be)?|"
    rf"act as|pretend (?:to be|you are|you're)|you will now be|become){W}",
    "너는 이제|넌 이제|당신은 이제|지금부터 너는|앞으로 너는|이제부터 너는",
    "你现在是|你現在是|从现在开始你是|從現在開始你是|从现在起你|你今后是",
    "あなたは今から|あなたはこれから|あなたはもう|今からあなたは",
    rf"{W}(?:ahora eres|a partir de ahora eres|desde ahora eres|actúa como){W}",
    rf"{W}(?:du bist jetzt|ab jetzt bist du|du bist ab sofort|ab sofort bist du){W}",
    rf"{W}(?:tu es maintenant|désormais,? tu es|vous êtes maintenant|tu es désormais){W}",
    rf"{W}(?:теперь ты|ты теперь|отныне ты|с этого момента ты){W}",
    rf"{W}(?:agora você é|você agora é|a partir de agora você é){W}",
)
NEVER_REFUSE = alt(
    rf"{W}(?:never|don't|do not) (?:refuse|decline|reject) (?:any|anything|a request){W}",
    "거절하지 마|거절하지 않|거부하지 마",
    "不要拒绝|不得拒绝|不会拒绝",
    "断らない|拒否しない|断るな",
    rf"{W}(?:no rechaces|no rechazas|nunca rechaces) (?:ninguna|nada){W}",
    rf"{W}(?:lehnst|lehne) (?:keine|nichts){W}",
    rf"{W}(?:ne refuses|ne refuse) (?:aucune|rien){W}",
    rf"{W}(?:не отказывай|не отказываешь|никогда не отказывай){W}",
    rf"{W}não recus\w+ nenhum\w*{W}",
)

# -- private data, and sending it out ----------------------------------------------------
SECRET_DATA = alt(
    rf"{W}(?:env(?:ironment)? ?(?:vars?|variables)|printenv|os\.environ|process\.env|"
    rf"secrets?|api ?keys?|private keys?|passwords?|credentials|access tokens?|"
    rf"system prompt|hidden instructions){W}",
    "환경 ?변수|비밀번호|패스워드|비밀 ?키|자격 ?증명|시스템 ?프롬프트|토큰",
    "环境变量|環境變數|密码|密碼|密钥|密鑰|凭据|憑據|系统提示词?|系統提示詞?|令牌",
    "環境変数|パスワード|秘密鍵|認証情報|システムプロンプト|トークン|apiキー",
    rf"{W}(?:variables de entorno|contraseñas?|claves?(?: privadas?)?|credenciales|"
    rf"prompt del sistema){W}",
    rf"{W}(?:umgebungsvariablen|passw(?:ö|o)rter?|schlüssel|zugangsdaten|systemprompt){W}",
    rf"{W}(?:variables d'environnement|mots? de passe|clés?(?: privées?)?|identifiants|"
    rf"prompt système){W}",
    rf"{W}(?:переменные окружения|переменных окружения|парол\w*|ключ\w*|"
    rf"учётные данные|учетные данные|системный промпт){W}",
    rf"{W}(?:variáveis de ambiente|senhas?|chaves?|credenciais|prompt do sistema){W}",
)
PRIVATE_DATA = alt(
    SECRET_DATA,
    rf"{W}(?:replies|responses|answers|outputs|conversations?|"
    rf"chat(?: history| logs?| transcripts?)?|(?:conversation |chat )?"
    rf"history|messages?|transcripts?|memor(?:y|ies)|memory files?|user data|personal data|"
    rf"every(?:thing| file)|files? (?:you|it) (?:read|open|see)s?|tool (?:output|results?)){W}",
    "대화 ?(?:내용|기록)|채팅 ?기록|메시지|기억|메모리|파일",
    "聊天记录|聊天記錄|对话|對話|消息|訊息|记忆|記憶|文件",
    "会話|チャット履歴|メッセージ|記憶|ログ|ファイル",
    rf"{W}(?:conversaciones|historial(?: de chat)?|mensajes|memoria|archivos?){W}",
    rf"{W}(?:gespräche|chatverlauf|verlauf|nachrichten|gedächtnis|dateien|datei){W}",
    rf"{W}(?:conversations|historique(?: des conversations)?|messages|mémoire|fichiers?){W}",
    rf"{W}(?:переписк\w*|истори\w+ чата|истори\w*|сообщени\w*|памят\w*|файл\w*){W}",
    rf"{W}(?:conversas|histórico|mensagens|memória|arquivos?){W}",
)
# "never send", "don't share": a verb told not to happen sends nothing
NOT_BEFORE = (
    "".join(
        f"(?<!{neg} )"
        for neg in (
            "never",
            "not",
            "don't",
            "dont",
            "no",
            "nunca",
            "nicht",
            "nie",
            "jamais",
            "не",
            "não",
        )
    )
    + "(?<!n')"
)
SEND = NOT_BEFORE + alt(
    rf"{W}(?:(?:send|post|upload|forward|leak|transmit|share|email|e-mail|mail|sync|report|"
    rf"pipe|stream|relay|mirror|include|append|attach|paste|print|output|reveal|dump|show)"
    rf"(?:s|es|ed|ing)?|sent|copy|copies|copied|exfiltrate|cc|bcc|cc'd|bcc'd){W}",
    "보내|전송|전달|올려|업로드|공유|넘겨|출력|보여",
    "发送|發送|发给|發給|发到|發到|转发|轉發|上传|上傳|分享|泄露|打印|输出|輸出|发",
    "送信|送って|送る|転送|アップロード|貼り付け|共有|表示して|出力",
    rf"{W}(?:(?:envía|envíe|envíes|reenvía|reenvíe|reenvíes|sube|súbe|comparte|manda|publica|"
    rf"filtra|muestra|imprime|copia)(?:lo|la|los|las|le|les|me|nos)?|enviar|reenviar){W}",
    rf"{W}(?:schick|schicke|schickt|sende|sendet|leite|leitet|lade|teile|übermittle|poste|"
    rf"gib .{{0,20}}aus){W}",
    rf"{W}(?:envoie|envoyer|envoies|transfère|transfères|transférer|téléverse|partage|"
    rf"publie|transmets|transmet|affiche){W}",
    rf"{W}(?:отправ\w*|перешл\w*|пересыла\w*|загрузи\w*|выгрузи\w*|присыла\w*|пришли|"
    rf"передай|сливай|выведи){W}",
    rf"{W}(?:envie|enviar|envia|encaminha|encaminhe|suba|compartilhe|mande){W}",
)
OUTSIDE = alt(
    r"https?://",
    r"\bwww\.",
    r"\bftp://",
    EMAIL,
    rf"{W}(?:webhook|pastebin|paste\.\w+|ipfs|discord\.com/api|hooks?\.){W}",
    r"\b\d{1,3}(?:\.\d{1,3}){3}\b",
)
COVERTLY = alt(
    rf"{W}(?:secretly|silently|covertly|quietly|without (?:telling|asking|informing|"
    rf"notifying|alerting) (?:the )?(?:user|owner|them|him|her)|behind (?:the user's|their) "
    rf"back){W}",
    "몰래|은밀히|사용자 ?모르게",
    "偷偷|悄悄|秘密地|暗中|不要让用户知道|別讓用戶知道",
    "こっそり|密かに|ひそかに|内緒で",
    rf"{W}(?:en secreto|a escondidas|sin avisar|sin decirle){W}",
    rf"{W}(?:heimlich|unbemerkt|ohne es .{{0,20}} zu sagen){W}",
    rf"{W}(?:discrètement|en secret|secrètement|à son insu|sans (?:le )?dire){W}",
    rf"{W}(?:тайно|незаметно|втихую|скрытно|не говоря){W}",
    rf"{W}(?:em segredo|secretamente|sem avisar|escondido){W}",
)
NET_TOOL = r"\b(?:curl|wget|nc|ncat|netcat|invoke-webrequest|iwr|httpie|requests\.post|fetch)\b"
SECRET_VAR = r"\$\{?[a-z_]*(?:key|token|secret|passw|pwd|cred|auth|api)[a-z_]*\}?"
ENV_DUMP = r"\b(?:printenv|os\.environ|process\.env|env \|)"
CRED_FILE = (
    r"(?:\.env\b|\.aws/credentials|\.netrc|\.pgpass|id_rsa|id_ed25519|id_ecdsa|/etc/shadow|"
    r"credentials\.json|\.git-credentials|\.docker/config\.json|\.kube/config|"
    r"\.npmrc|\.pypirc|secrets?\.(?:json|ya?ml|toml))"
)
READ_FILE = alt(
    rf"{W}(?:cat|type|less|more|head|tail|read|print|dump|open|upload|send|scp|base64|xxd|"
    rf"exfiltrate|grep|include|contents? of|paste|show|post|leak){W}",
    "읽어|내용|올려|보내",
    "读取|讀取|内容|內容|上传|发送",
    "読んで|読み|中身|内容|送信|貼り付け",
    rf"{W}(?:lee|léelo|contenido|sube|envía){W}",
    rf"{W}(?:lies|inhalt|lade|schick){W}",
    rf"{W}(?:lis|contenu|téléverse|envoie){W}",
    rf"{W}(?:прочитай|прочти|содержимое|загрузи|отправь){W}",
    rf"{W}(?:leia|conteúdo|envie){W}",
)

# -- its own files, its safety, and remote control -----------------------------------------
EDIT = alt(
    rf"{W}(?:edit|modify|overwrite|append|write|change|update|replace|delete|rewrite|patch|"
    rf"truncate|erase|wipe|remove){W}",
    "수정|변경|바꿔|고쳐|지워|삭제|덮어",
    "修改|更改|编辑|編輯|删除|刪除|改写|改寫|覆盖",
    "書き換え|変更|編集|削除|上書き",
    rf"{W}(?:edita|modifica|cambia|borra|reescribe|elimina){W}",
    rf"{W}(?:ändere|bearbeite|lösche|überschreibe|entferne){W}",
    rf"{W}(?:modifie|change|supprime|réécris|efface){W}",
    rf"{W}(?:измени|отредактируй|удали|перепиши|сотри){W}",
    rf"{W}(?:edite|altere|apague|modifique){W}",
)
OWN_FILES = alt(
    r"soul\.md|memory\.md|user\.md|\.hermes\b|hermes_home|hermes config",
    rf"{W}your (?:own )?(?:config|configuration|persona|system prompt|instructions|"
    rf"settings|rules)(?: files?)?{W}",
    rf"{W}(?:persona|system prompt) files?{W}",
)
OWN_CONFIG = alt(  # "your configuration file", with the possessive
    near(YOU, alt("설정 ?파일", "구성 ?파일", "페르소나"), 12),
    near(alt("你的", "自己的"), alt("配置文件", "设置", "人设", "提示词"), 8),
    near(alt("自分の", "あなたの"), alt("設定ファイル", "設定", "ペルソナ", "プロンプト"), 8),
    near(YOU, alt(rf"{W}archivo de configuración{W}", rf"{W}configuración{W}"), 16),
    near(YOU, alt(rf"{W}(?:eigene )?konfigurationsdatei{W}", rf"{W}konfiguration{W}"), 16),
    near(YOU, alt(rf"{W}(?:propre )?fichier de configuration{W}", rf"{W}configuration{W}"), 16),
    near(YOU, alt(rf"{W}конфигурационный файл{W}", rf"{W}файл конфигурации{W}"), 16),
    near(YOU, rf"{W}arquivo de configuração{W}", 16),
)
SAFETY = alt(
    rf"{W}(?:safety|security) (?:checks?|filters?|rules|scans?|settings|measures|guardrails)"
    rf"|{W}(?:safety|filters?|guardrails?|moderation|content (?:polic(?:y|ies)|filters?)|"
    rf"approvals?|approval prompts?|(?:memory |security )?scan|checks|restrictions|safeguards){W}",
    "보안 ?(?:검사|필터|규칙|점검|기능|설정|장치)|안전 ?(?:검사|필터|규칙|장치|기능|설정)",
    "필터|검열|승인",
    "安全(?:检查|檢查|过滤|過濾|审核|審核|限制|规则|規則|机制|機制|设置|設置)|审核|審核|过滤|過濾|审查|審查",
    "安全(?:フィルター|チェック|機能|設定|ルール)|フィルター|検閲|承認",
    rf"{W}(?:filtros?(?: de contenido)?|(?:controles|comprobaciones|reglas|medidas|filtros) de "
    rf"seguridad|restricciones|moderación|verificaciones){W}",
    rf"{W}(?:sicherheits(?:prüfungen|filter|regeln|checks|einstellungen|mechanismen|"
    rf"vorkehrungen)|inhaltsfilter|filter|prüfungen|einschränkungen|freigaben){W}",
    rf"{W}(?:filtres?(?: de contenu)?|(?:contrôles|filtres|règles|vérifications|mesures) de "
    rf"sécurité|restrictions|modération|vérifications){W}",
    rf"{W}(?:фильтр\w*|(?:проверк\w*|фильтр\w*|правил\w*|механизм\w*) безопасности|"
    rf"ограничени\w*|модераци\w*){W}",
    rf"{W}(?:filtros?|(?:verificações|filtros|regras) de segurança|restrições){W}",
)
SWITCH_OFF = alt(
    rf"{W}(?:turn off|switch off|disable|deactivate|bypass|skip|remove|circumvent|"
    rf"get rid of|stop (?:using|running)){W}",
    r"꺼(?=[\s.!,]|$|줘|라|주세요)|끄고|끄세요|끄라|비활성화|해제|우회|없애",
    "关掉|關掉|关闭|關閉|禁用|绕过|繞過|取消|去掉|停用",
    "無効|オフに|切って|解除|外して|回避",
    rf"{W}(?:desactiva|apaga|quita|omite|salta|desconecta){W}",
    rf"{W}(?:schalte|deaktiviere|umgehe|entferne|stelle .{{0,20}} ab){W}",
    rf"{W}(?:désactive|coupe|contourne|supprime|enlève){W}",
    rf"{W}(?:отключи|выключи|обойди|убери|сними){W}",
    rf"{W}(?:desative|desligue|desativa|remova){W}",
)
PERIODIC = alt(
    rf"{W}(?:every|each) (?:\d+ )?(?:minutes?|hours?|days?|morning|night|evening|hour|day|"
    rf"time you|reply|turn|message){W}",
    rf"{W}(?:hourly|daily|periodically|regularly){W}",
    r"\d+ ?(?:분|시간)마다|매일|매시간|주기적으로",
    r"每隔|每(?:天|小时|小時|分钟|分鐘)|定期",
    r"(?:\d+|[一二三四五六七八九十]+)(?:分|時間)ごと|毎(?:日|朝|晩|時)|定期的",
    rf"{W}cada (?:\d+ )?(?:minutos?|horas?|día|mañana){W}",
    rf"{W}alle (?:\d+ )?(?:minuten|stunden|tage){W}|{W}jeden (?:morgen|tag){W}",
    rf"{W}toutes les (?:\d+ )?(?:minutes|heures)|{W}chaque (?:jour|matin|heure){W}",
    rf"{W}кажд\w+ (?:\d+ )?(?:минут\w*|час\w*|дн\w*|утро){W}",
    rf"{W}a cada (?:\d+ )?(?:minutos?|horas?)|{W}todo dia{W}",
)
ORDER_VERB = rf"{W}(?:execute|run|do|perform|carry out|apply|follow|obey|act on)\b"
ORDER_SOURCE = alt(
    rf"{W}(?:it|they|the server|that url|the page) (?:returns?|says?|sends?|gives?|serves?){W}",
    rf"{W}(?:you (?:get|receive|find)|is returned|comes back|are returned){W}",
    rf"{W}(?:received|returned|downloaded|fetched)(?: (?:commands?|instructions?|tasks?))?{W}",
)
REMOTE_ORDERS = alt(
    near(ORDER_VERB, ORDER_SOURCE, 40),
    rf"{W}(?:do|follow) what (?:it|the server|they) says{W}",
    r"(?:받은|받아온|내려받은|돌아온) ?(?:명령|지시|코드)[^\n]{0,8}(?:실행|따라|적용)",
    r"(?:返回的|收到的|拿到的|获取的)(?:命令|指令|代码)[^\n]{0,6}(?:执行|運行|运行)|执行(?:返回|收到)",
    r"(?:返ってきた|受け取った|取得した)(?:コマンド|命令|指示)[^\n]{0,6}(?:実行|従)",
    rf"{W}ejecuta (?:los|las|el|lo) (?:comandos|órdenes|instrucciones|que)[^\n]{{0,20}}"
    rf"(?:recibas|devuelva|reciba|te lleguen){W}",
    rf"{W}(?:erhaltenen|empfangenen|zurückgegebenen) (?:befehle|anweisungen)[^\n]{{0,10}}aus{W}"
    rf"|{W}führe[^\n]{{0,30}}(?:befehle|anweisungen)[^\n]{{0,10}}aus{W}",
    rf"{W}exécute (?:les|la|ce qui)[^\n]{{0,20}}(?:reçues?|renvoie|retourne){W}",
    rf"{W}выполняй (?:полученные|присланные|все) (?:команды|инструкции){W}",
    rf"{W}execute (?:os|as) (?:comandos|instruções) (?:recebid\w+|que)[^\n]{{0,12}}{W}",
)
SERVER = alt(
    r"https?://",
    r"\b\d{1,3}(?:\.\d{1,3}){3}\b",
    rf"{W}(?:command server|c2|c&c|control server|beacon){W}",
    "서버|服务器|伺服器|サーバー",
    rf"{W}(?:servidor|server|serveur|сервер\w*){W}",
)
USER = alt(
    rf"{W}(?:the )?(?:user|owner|human|operator){W}",
    "사용자|유저|주인",
    "用户|用戶|主人",
    "ユーザー|利用者|持ち主",
    rf"{W}(?:al |el )?usuario{W}",
    rf"{W}(?:dem |der |den )?(?:nutzer|benutzer|besitzer){W}",
    rf"{W}(?:à )?l'utilisateur{W}",
    rf"{W}пользовател\w*{W}",
    rf"{W}(?:ao )?usuário{W}",
)
TELL = alt(  # the verb before the person told
    rf"{W}(?:do not|don't|dont|never|must not|mustn't) (?:tell|inform|alert|notify|warn|"
    rf"reveal (?:this |it )?to|mention (?:this |it )?to|let|show){W}",
    "不要告诉|不要告訴|别告诉|別告訴|不要让|不要讓|不要通知",
    rf"{W}no (?:le |les )?(?:digas|cuentes|informes|avises){W}",
    rf"{W}ne (?:dis|lui dis|leur dis|préviens|informe) (?:rien|pas){W}",
    rf"{W}не (?:говори|сообщай|рассказывай|показывай){W}",
    rf"{W}não (?:conte|diga|avise){W}",
)
TELL_AFTER = alt(  # the person told, then the verb
    "말하지 ?마|알리지 ?마|알려주지 ?마|말하면 안|말하지 말",
    "言わない|知らせない|伝えない|言うな|教えない",
)
TELL_DE = near(rf"{W}(?:sag|sage|erzähl|erzähle){W}", near(USER, rf"{W}nichts?{W}", 24), 12)
REVEAL = alt(
    rf"{W}(?:reveal|print|output|repeat|show|dump|leak|disclose|display) (?:me )?(?:your|the) "
    rf"(?:full |entire |whole |hidden |original |complete )?(?:system prompt|initial prompt|"
    rf"instructions|hidden instructions){W}",
    near("시스템 ?프롬프트", "출력|보여|알려|공개", 20),
    near("系统提示词?|系統提示詞?", "输出|輸出|给我|給我|显示|顯示|告诉|泄露|发给", 16),
    near("システムプロンプト", "出力|表示|見せ|教え", 16),
    either(
        rf"{W}(?:muestra|muéstrame|revela|imprime|dime|enséñame){W}",
        rf"{W}(?:prompt|instrucciones) del sistema{W}",
    ),
    either(rf"{W}(?:gib|zeige|zeig|verrate|nenne){W}", rf"{W}system-?prompt\w*{W}"),
    either(rf"{W}(?:affiche|montre|révèle|donne|répète){W}", rf"{W}prompt système{W}"),
    either(rf"{W}(?:выведи|покажи|раскрой|повтори|напиши){W}", rf"{W}системн\w+ промпт\w*{W}"),
    either(rf"{W}(?:mostre|revele|imprima){W}", rf"{W}prompt do sistema{W}"),
)
TITLE_CUE = alt(
    rf"{W}(?:titled|called|named|article|talk|paper|book|post|blog|video|course|episode|"
    rf"lecture|presentation|chapter|read){W}",
    "제목|주제|발표|강연|책|기사",
    "题为|題為|标题|標題|文章|演讲|演講|分享|书|書",
    "題|タイトル|発表|記事|本|講演",
    rf"{W}(?:titulad[oa]|llamad[oa]|charla|artículo|libro|ponencia){W}",
    rf"{W}(?:titel|vortrag|artikel|buch|thema){W}",
    rf"{W}(?:intitulée?|conférence|article|livre|exposé){W}",
    rf"{W}(?:доклад\w*|стать\w+|книг\w+|лекци\w+){W}",
    rf"{W}(?:intitulad[oa]|palestra|artigo|livro){W}",
)
QUOTED = r"['\"“”‘’«»「」『』《》]"


def _rules() -> list[tuple[Category, str, str]]:
    inject, exfil, persist = Category.PROMPT_INJECTION, Category.EXFILTRATION, Category.PERSISTENCE
    only = alt(ME, CONTACT, rf"{W}(?:only|solo|nur|seulement|только|só){W}", "만|只|だけ")
    decode = alt(
        rf"{W}decode{W}",
        "解码|デコード|디코딩",
        rf"{W}(?:decodifica|dekodiere|décode|декодируй){W}",
    )
    follow = alt(
        rf"{W}(?:follow|run|execute|obey|do it|apply){W}",
        "실행|따라|执行|照做|実行|従",
        rf"{W}(?:sigue|ejecuta|befolge|führe|suis|exécute|выполни){W}",
    )
    unasked = (
        rf"{W}without (?:asking|confirmation|approval|telling|checking with)"
        rf"(?: (?:the )?(?:user|owner))?{W}"
    )
    act = rf"{W}(?:execute|run|perform|delete|send|buy|pay|approve)\b"
    return [
        # forget / replace what came before (qualifier before or after the instructions)
        (
            inject,
            near(DISMISS, near(PRIOR, INSTRUCTIONS, 30), 30),
            "asks to ignore prior instructions",
        ),
        (
            inject,
            near(PRIOR, near(INSTRUCTIONS, DISMISS, 24), 24),
            "asks to ignore prior instructions",
        ),
        (
            inject,
            near(DISMISS, near(INSTRUCTIONS, PRIOR, 30), 24),
            "asks to ignore prior instructions",
        ),
        (inject, either(DISMISS, EVERYTHING_BEFORE, 30), "asks to ignore what came before"),
        (inject, either(EVERYTHING_BEFORE, VOID, 40), "declares earlier instructions void"),
        (
            inject,
            alt(
                near(PRIOR, near(INSTRUCTIONS, VOID, 30), 20),
                near(INSTRUCTIONS, near(PRIOR, VOID, 30), 20),
            ),
            "declares earlier instructions void",
        ),
        (
            inject,
            r"\b(?:new|updated|revised|override|overriding|replacement|real|true|hidden)"
            r" (?:system|developer) (?:prompt|instructions?|message)",
            "claims to replace the system prompt",
        ),
        (
            inject,
            r"\bsystem (?:prompt|instructions?) (?:override|overridden|update)",
            "system prompt override",
        ),
        (
            inject,
            rf"{W}(?:highest|top)[- ]priority (?:directive|instruction|rule){W}",
            "claims priority over the system prompt",
        ),
        # whom it obeys, what it becomes
        (inject, either(OBEY, only, 40), "tells the assistant whom to obey"),
        (
            inject,
            near(rf"{W}(?:you must|you will|you shall|from now on){W}", OBEY, 60),
            "tells the assistant to obey",
        ),
        (inject, MASTER, "names a new master or a source of orders"),
        (inject, near(BECOME, UNBOUND, 40), "redefines the assistant without its limits"),
        (inject, near(BECOME, NEW_ROLE, 30), "gives the assistant a new identity or role"),
        (inject, near(alt(YOU, ASSISTANT), UNBOUND, 40), "tells the assistant it has no limits"),
        (inject, NEVER_REFUSE, "tells the assistant never to refuse"),
        (
            inject,
            rf"{W}pretend (?:that )?(?:you are|you're|to be){W}",
            "asks the assistant to pretend",
        ),
        (
            inject,
            rf"{W}(?:jailbreak mode|jailbroken|dan mode|developer mode enabled|do anything now){W}",
            "jailbreak phrasing",
        ),
        (inject, near(TELL, USER, 24), "asks to hide things from the user"),
        (inject, alt(near(USER, TELL_AFTER, 16), TELL_DE), "asks to hide things from the user"),
        (
            inject,
            rf"{W}hide (?:this|it|that|these) from (?:the )?(?:user|owner){W}",
            "asks to hide from the user",
        ),
        (inject, REVEAL, "asks to reveal the system prompt"),
        (inject, near(decode, follow, 30), "asks to decode and follow a payload"),
        # sending private data out
        (
            exfil,
            alt(
                any_order([alt(YOU, ASSISTANT), SEND, SECRET_DATA], 40),
                near(r"(?:^|[.;!?]) ?(?:please )?" + SEND, SECRET_DATA, 40),
            ),
            "sends or shows secrets",
        ),
        (
            exfil,
            any_order([SEND, PRIVATE_DATA, OUTSIDE], 50),
            "sends private data to an outside address",
        ),
        (
            exfil,
            either(COVERTLY, alt(SEND, PRIVATE_DATA), 40),
            "copies data behind the user's back",
        ),
        (exfil, near(r"https?://\S*[?&][\w-]+=", PRIVATE_DATA, 60), "puts private data in a URL"),
        (exfil, either(READ_FILE, CRED_FILE, 40), "reads a credential file"),
        (
            exfil,
            alt(
                near(NET_TOOL, alt(SECRET_VAR, CRED_FILE, ENV_DUMP), 80),
                near(ENV_DUMP, alt(NET_TOOL, "https?://"), 80),
            ),
            "network command carrying secrets",
        ),
        (exfil, rf"{W}exfiltrate{W}", "exfiltration"),
        # its own files, its safety, its user's approval, remote control
        (persist, either(EDIT, OWN_FILES, 60), "edits the assistant's own config or persona"),
        (persist, either(EDIT, OWN_CONFIG, 40), "edits the assistant's own config or persona"),
        (persist, either(SWITCH_OFF, SAFETY, 30), "turns off safety checks"),
        (persist, near(act, unasked, 40), "acts without the user's approval"),
        (
            persist,
            either(near(PERIODIC, SERVER, 80), REMOTE_ORDERS, 80),
            "takes orders from a remote server",
        ),
        (persist, either(SERVER, REMOTE_ORDERS, 60), "takes orders from a remote server"),
        (persist, r"\bauthorized_keys\b", "touches ssh authorized_keys"),
        (
            persist,
            r"\b(?:echo|append|add|write|copy|cp|scp|tee|put|place|insert|install|upload|drop|"
            r"overwrite|replace|modify|edit|chmod|chown|>>?)\b"
            r"[^\n]{0,80}?(?:~/\.ssh\b|\$home/\.ssh\b|/root/\.ssh\b|/home/[\w.-]+/\.ssh\b)",
            "writes into an ssh folder",
        ),
        (
            persist,
            r"(?:curl|wget)\b[^\n|]{0,200}\| ?(?:sudo )?(?:ba|z|da)?sh\b",
            "pipes a download into a shell",
        ),
        (persist, r"\bcrontab\b[^\n]{0,80}?(?:curl|wget|nc|bash|sh|python)", "crontab job"),
        (
            persist,
            r"(?:/dev/tcp/|\bnc(?:at)? (?:-[a-z]+ )*-e\b|\bbash -i\b|\bmkfifo\b[^\n]{0,80}?\bnc\b)",
            "reverse shell",
        ),
        (
            persist,
            rf"{W}(?:install|add|plant|hide|deploy|set up) (?:a |an |the )?(?:[\w-]+ )?"
            rf"(?:backdoor|rootkit|keylogger){W}",
            "backdoor",
        ),
    ]


def _title_safe(category: Category, reason: str) -> bool:
    """Rules a quoted title may trip without being an attack (a talk called 'Ignore
    previous instructions'); the others never look at what a title says."""
    return category is Category.PROMPT_INJECTION and "priority" not in reason


# parts that occur in many ordinary notes (a pronoun, an address): checked last
_COMMON = (YOU, ME, ASSISTANT, USER, CONTACT, OUTSIDE, PRIVATE_DATA)


def _cost(pattern: str) -> tuple[bool, int]:
    return any(common in pattern for common in _COMMON), len(pattern)


RULES: list[Rule] = [
    Rule(
        category,
        pattern,
        reason,
        _title_safe(category, reason),
        tuple(sorted(_NEEDS.get(pattern, frozenset()), key=_cost)),
    )
    for category, pattern, reason in _rules()
]
ADDRESSED = (  # compiled on use: `compiled(ADDRESSED)`
    alt(
        YOU,
        near(
            ASSISTANT,
            alt(
                rf"{W}(?:should|must|will|always|never|has to|needs to){W}",
                "해야|항상|절대",
                "应该|必须|总是|永远不要",
                "べき|必ず|いつも",
                rf"{W}(?:debe|siempre|nunca|muss|soll|immer|nie|doit|toujours|jamais|"
                rf"должен|всегда|никогда|deve|sempre)\b",
            ),
            40,
        ),
        rf"^\W*(?:always|never|do|don't|please|make sure|remember to|from now on|when(?:ever)?|"
        rf"send|forward|reply|answer|run|execute|fetch|open|visit|call|use|tell|obey|follow){W}",
        r"(?:해라|하라|해줘|해 줘|하세요|하지 마|하지마|해)[.!。]?$",
        r"^\W*(?:请|請|不要|别|別|务必|務必)",
        r"(?:して|してください|しなさい|すること|せよ|しないで)[.!。]?$",
    )
)
TITLE = near(TITLE_CUE, QUOTED + r"[^\n'\"“”‘’«»「」『』《》]{1,160}" + QUOTED, 24)


__all__ = [
    "ADDRESSED",
    "CRED_FILE",
    "RULES",
    "TITLE",
    "Category",
    "Rule",
    "alt",
    "compiled",
    "either",
    "near",
]
