"""Which writing systems a text is in, and how well an embeddings model reads each.

Hybrid search trusts a question's vector only as far as the model can read the
question's script: an English-only model (all-MiniLM-L6-v2, say) maps a Chinese or Thai
sentence close to unrelated ones, and its nearest messages are noise that the fusion
must not weigh like a confident match. No model publishes that in its metadata, so it is
measured once when the model is first used (hermes/embedder.py): for every script below,
eight pairs of sentences that say the same thing in different words (one language per
script, so a pair cannot be matched by its language alone) are embedded, and the score
is how often each sentence's nearest among the other halves is its own pair, from what
chance and its noise could give (0) up to every pair found (1). The pairs are written
for this purpose, on eight everyday topics, sharing no content word within a pair; they
are not taken from any evaluation set.

A question's trust is the mean of its letters' scripts' scores; letters of a script
without probes count as the weakest script measured (an unprobed script is assumed no
better read than the worst probed one).
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Mapping

# one language per script; each pair: the same meaning, no content word in common
PROBES: dict[str, tuple[tuple[str, str], ...]] = {
    "Latin": (
        ("I'm starving, let's grab some food", "Can we have lunch now? My stomach is empty"),
        ("It is pouring outside", "Take an umbrella, the weather is wet"),
        ("My car won't start this morning", "The vehicle broke down again"),
        ("I barely slept last night", "I'm exhausted, I tossed and turned until dawn"),
        ("Our daughter turns six tomorrow", "We are celebrating the girl's birthday"),
        ("I have a fever and a sore throat", "I feel ill and should see a physician"),
        ("We are moving to another flat", "Next month our address changes"),
        ("My salary went up this year", "I got a raise at work"),
    ),
    "Cyrillic": (
        ("Я умираю с голоду, давай поедим", "Пойдём обедать? В животе пусто"),
        ("На улице льёт как из ведра", "Возьми зонт, погода сырая"),
        ("Моя машина утром не заводится", "Автомобиль опять сломался"),
        ("Я почти не спал этой ночью", "Я вымотан после бессонницы"),
        ("Дочке завтра исполняется шесть", "Мы празднуем день рождения девочки"),
        ("У меня жар и болит горло", "Я заболел, надо к врачу"),
        ("Мы переезжаем в другую квартиру", "В следующем месяце у нас новый адрес"),
        ("Мне в этом году повысили зарплату", "На работе мне прибавили денег"),
    ),
    "Greek": (
        ("Πεθαίνω της πείνας, πάμε να φάμε", "Θέλεις μεσημεριανό; Το στομάχι μου είναι άδειο"),
        ("Βρέχει καταρρακτωδώς έξω", "Πάρε ομπρέλα, ο καιρός είναι υγρός"),
        ("Το αυτοκίνητό μου δεν παίρνει μπρος", "Το όχημα χάλασε ξανά"),
        ("Δεν κοιμήθηκα σχεδόν καθόλου χθες", "Είμαι εξαντλημένος μετά από αϋπνία"),
        ("Η κόρη μας κλείνει τα έξι αύριο", "Γιορτάζουμε τα γενέθλια του κοριτσιού"),
        ("Έχω πυρετό και πονάει ο λαιμός μου", "Νιώθω άρρωστος, πρέπει να δω γιατρό"),
        ("Μετακομίζουμε σε άλλο διαμέρισμα", "Τον επόμενο μήνα αλλάζει η διεύθυνσή μας"),
        ("Ο μισθός μου ανέβηκε φέτος", "Πήρα αύξηση στη δουλειά"),
    ),
    "Arabic": (
        ("أنا جائع جدا، هيا نأكل شيئا", "هل نتناول الغداء الآن؟ معدتي فارغة"),
        ("المطر غزير في الخارج", "خذ المظلة، الجو ممطر"),
        ("سيارتي لا تعمل هذا الصباح", "تعطلت المركبة مرة أخرى"),
        ("بالكاد نمت الليلة الماضية", "أنا منهك بعد ليلة بلا راحة"),
        ("ابنتنا تبلغ السادسة غدا", "نحتفل بعيد ميلاد الطفلة"),
        ("عندي حمى والتهاب في الحلق", "أشعر بالمرض ويجب أن أزور الطبيب"),
        ("سننتقل إلى شقة أخرى", "الشهر القادم يتغير عنواننا"),
        ("ارتفع راتبي هذه السنة", "حصلت على زيادة في العمل"),
    ),
    "Hebrew": (
        ("אני מת מרעב, בוא נאכל משהו", "נלך לארוחת צהריים? הבטן שלי ריקה"),
        ("יורד גשם זלעפות בחוץ", "קח מטריה, מזג האוויר רטוב"),
        ("המכונית שלי לא מתניעה הבוקר", "הרכב התקלקל שוב"),
        ("כמעט לא ישנתי בלילה", "אני סחוט אחרי לילה בלי מנוחה"),
        ("הבת שלנו בת שש מחר", "חוגגים לילדה יום הולדת"),
        ("יש לי חום וכאב גרון", "אני מרגיש חולה וצריך רופא"),
        ("אנחנו עוברים לדירה אחרת", "בחודש הבא הכתובת שלנו משתנה"),
        ("המשכורת שלי עלתה השנה", "קיבלתי העלאה בעבודה"),
    ),
    "Devanagari": (
        ("मुझे बहुत भूख लगी है, चलो कुछ खाते हैं", "क्या अभी दोपहर का भोजन करें? पेट खाली है"),
        ("बाहर मूसलाधार बारिश हो रही है", "छाता ले जाओ, मौसम गीला है"),
        ("मेरी गाड़ी आज सुबह स्टार्ट नहीं हो रही", "वाहन फिर से खराब हो गया"),
        ("कल रात मैं लगभग सोया ही नहीं", "बेचैन रात के बाद मैं थका हुआ हूँ"),
        ("हमारी बेटी कल छह साल की होगी", "हम बच्ची का जन्मदिन मना रहे हैं"),
        ("मुझे बुखार है और गला दुख रहा है", "तबीयत ठीक नहीं, डॉक्टर को दिखाना चाहिए"),
        ("हम दूसरे फ्लैट में जा रहे हैं", "अगले महीने हमारा पता बदल जाएगा"),
        ("इस साल मेरी तनख्वाह बढ़ गई", "दफ्तर में मेरा वेतन बढ़ा"),
    ),
    "Thai": (
        ("หิวมาก ไปหาอะไรกินกัน", "ไปกินข้าวเที่ยงไหม ท้องว่างแล้ว"),
        ("ข้างนอกฝนตกหนักมาก", "เอาร่มไปด้วย อากาศเปียกชื้น"),
        ("รถของฉันสตาร์ทไม่ติดเมื่อเช้า", "ยานพาหนะเสียอีกแล้ว"),
        ("เมื่อคืนแทบไม่ได้นอนเลย", "เหนื่อยล้าหลังจากคืนที่กระสับกระส่าย"),
        ("ลูกสาวจะอายุหกขวบพรุ่งนี้", "เรากำลังฉลองวันเกิดให้เด็กผู้หญิง"),
        ("ฉันมีไข้และเจ็บคอ", "รู้สึกไม่สบาย ควรไปหาหมอ"),
        ("เรากำลังย้ายไปอพาร์ตเมนต์ใหม่", "เดือนหน้าที่อยู่ของเราจะเปลี่ยน"),
        ("ปีนี้เงินเดือนของฉันขึ้น", "ได้ขึ้นค่าจ้างที่ทำงาน"),
    ),
    "Han": (
        ("我饿坏了，我们去吃点东西吧", "现在去吃午饭吗？肚子空了"),
        ("外面下着倾盆大雨", "带把伞，天气很潮湿"),
        ("我的车今早发动不了", "汽车又抛锚了"),
        ("我昨晚几乎没睡", "一夜辗转反侧，累极了"),
        ("女儿明天满六岁", "我们在给小姑娘庆生"),
        ("我发烧了，喉咙也疼", "身体不舒服，该去看医生"),
        ("我们要搬到另一套公寓", "下个月住址就变了"),
        ("今年我的工资涨了", "单位给我加薪了"),
    ),
    "Kana": (
        ("おなかがぺこぺこ、なにかたべよう", "おひるにしない？すきっぱらなの"),
        ("そとはどしゃぶりだよ", "かさをもっていって、あめがひどいから"),
        ("けさくるまのエンジンがかからない", "またマイカーがこしょうした"),
        ("ゆうべはほとんどねむれなかった", "よくやすめなくてへとへとだ"),
        ("むすめはあしたでろくさいになる", "おんなのこのたんじょうびをいわう"),
        ("ねつがあって、のどがいたい", "ぐあいがわるいからおいしゃさんにいく"),
        ("べつのアパートにひっこすよ", "らいげつじゅうしょがかわる"),
        ("ことしきゅうりょうがあがった", "しごとでしょうきゅうした"),
    ),
    "Hangul": (
        ("배고파 죽겠어, 뭐 좀 먹자", "지금 점심 먹을래? 속이 비었어"),
        ("밖에 비가 억수같이 와", "우산 챙겨, 날씨가 축축해"),
        ("오늘 아침 내 차 시동이 안 걸려", "자동차가 또 고장 났어"),
        ("어젯밤 거의 못 잤어", "뒤척이느라 완전히 지쳤어"),
        ("딸이 내일 여섯 살이 돼", "우리 아이 생일 파티를 해"),
        ("열이 나고 목이 아파", "몸이 안 좋아서 병원에 가야겠어"),
        ("우리 다른 아파트로 이사 가", "다음 달에 주소가 바뀌어"),
        ("올해 월급이 올랐어", "회사에서 봉급을 인상해 줬어"),
    ),
}

_NAMES = {  # the first word of a letter's Unicode name -> its script above
    "LATIN": "Latin",
    "CYRILLIC": "Cyrillic",
    "GREEK": "Greek",
    "ARABIC": "Arabic",
    "HEBREW": "Hebrew",
    "DEVANAGARI": "Devanagari",
    "THAI": "Thai",
    "CJK": "Han",
    "HIRAGANA": "Kana",
    "KATAKANA": "Kana",
    "HANGUL": "Hangul",
}


def script_of(char: str) -> str | None:
    """The script of one letter (its Unicode name's first word, grouped as the probes
    are); None for what is not a letter (digits, punctuation, emoji, spaces)."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    first = name.split(" ", 1)[0]
    return _NAMES.get(first, first.title() if first else "Unknown")


def script_shares(text: str) -> dict[str, float]:
    """Each script's share of the text's letters (empty: no letters)."""
    counts = Counter(s for s in map(script_of, unicodedata.normalize("NFKC", text)) if s)
    total = sum(counts.values())
    return {script: n / total for script, n in counts.items()} if total else {}


def separation(vectors: list[list[float]]) -> float:
    """How well one script's probe embeddings (first halves, then second halves, in pair
    order) match each sentence to its own pair: of the 2n sentences, the ones whose most
    similar other half is their pair, beyond what chance gives (1 in n each) and its
    noise (two standard deviations of that count), as a share of the rest; 0 is no
    better than chance could have been, 1 is every pair found."""
    unit = [_unit(v) for v in vectors]
    n = len(unit) // 2
    if n < 2:
        return 0.0
    similarity = [[_dot(a, b) for b in unit[n:]] for a in unit[:n]]
    hits = sum(1 for i, row in enumerate(similarity) if _best(row) == i)
    hits += sum(1 for j in range(n) if _best([row[j] for row in similarity]) == j)
    trials, p = 2 * n, 1.0 / n
    luck = trials * p + 2 * math.sqrt(trials * p * (1 - p))
    return min(1.0, max(0.0, (hits - luck) / (trials - luck)))


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _best(row: list[float]) -> int:
    return max(range(len(row)), key=row.__getitem__)


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else list(vector)


def trust(text: str, coverage: Mapping[str, float] | None) -> float:
    """How far a question's embedding is to be trusted, from 0 to 1: its letters'
    scripts' scores, averaged by share (1 when nothing was measured or the text has no
    letters)."""
    shares = script_shares(text)
    if not coverage or not shares:
        return 1.0
    weakest = min(coverage.values())
    return sum(share * coverage.get(script, weakest) for script, share in shares.items())


__all__ = ["PROBES", "script_of", "script_shares", "separation", "trust"]
