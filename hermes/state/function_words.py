"""The function words of the languages people ask in, beside search.py's English list.

A question's articles, pronouns, prepositions, conjunctions and auxiliaries say nothing
about what it asks for, but the word index matches them like any other word: in a
small history "la", "el", "für" or "для" are rare enough to weigh, and a message that
shares two of them with the question ("el coche no arranca por las mañanas" for "¿qué
problema sufre la mascota en las patas?") stood out from the rest and outranked the
message the vectors had found. So a question's function words are dropped (search.py
`parse_query`), in the language it is written in: the one whose list holds more of
its words than any other (ties keep English alone: "son", "die" and "a" are words of
some languages and function words of others).

Only closed word classes are listed, and only forms a question uses: the published
stop-word lists (Snowball's through NLTK, stopwords-iso, the `stop-words` package)
were made for document retrieval and hold content words ("trabajo", "lavoro",
"время", "nouveau"), which are what a person's question is about.
"""

from __future__ import annotations

import re

_LISTS = {
    "es": """
        a al algo algún alguna alguno algunos ante bajo cada como cómo con contra cual cuál
        cuales cuáles cuando cuándo cuanto cuánto cuánta cuántos cuántas de del desde donde
        dónde durante e el él ella ellas ellos en entre era eran es esa ese eso esta está
        estaba están este esto estos estoy fue fueron ha había han has he hay la las le les
        lo los me mi mis mí muy nada ni no nos nosotros o os para pero por porque qué que
        quien quién quienes se ser si sí sin sobre son su sus también te tengo tiene tienen
        ti tu tú tus un una unas uno unos usted y ya yo
    """,
    "pt": """
        a à ao aos as às até com como da das de do dos e é ela elas ele eles em entre era
        essa esse esta está estão este eu foi for há isso isto já lhe lhes mas me meu meus
        minha minhas na nas não nem no nos nós num numa o onde os ou para pela pelo pelos
        por porque quais qual quando quanto quantos quantas que quê quem se sem ser seu
        seus sua suas são também te tem tenho teu tua um uma umas uns você vocês
    """,
    "fr": """
        à au aux avec ce ces cet cette c ça comment d dans de des du elle elles en est et
        étais était être eu il ils j je l la le les leur leurs lui m ma mais me mes moi mon
        n ne ni nous on ont ou où par pas pour qu quand que quel quelle quelles quels qui
        quoi s sa sans se ses si son sont sur t ta te tes toi ton tu un une vos votre vous
        y ai as avez avons est-ce
    """,
    "it": """
        a ad al alla alle allo ai agli che chi ci come con cosa cui da dal dalla dalle dai
        degli dei del della delle dello di dove e è ed gli ha hai hanno ho i il in io l la
        le lei li lo loro lui ma me mi mia mie miei mio ne nei nel nella nelle noi non o
        per perché più quale quali quando quanto quanti quanta quante quel quella quello
        questa questo se si sono su sua sue suo suoi sul sulla te ti tu tua tuo un una uno
        voi c dell dall nell all sull
    """,
    "de": """
        am an auf aus bei bin bist da das dass dem den der des dich die dir du ein eine
        einem einen einer eines er es für hab habe haben hast hat hatte ich ihm ihn ihr
        ihre im in ins ist mein meine meinem meinen meiner mich mir mit nach nicht ob oder
        sein seine sie sind über um und uns unser unsere vom von vor war was wann warum
        welche welchem welchen welcher welches wer wie wo woher wohin zu zum zur
    """,
    "nl": """
        aan als bij dat de den der die dit door een en er had heb hebben heeft het hij hoe
        ik in is je jij jou jouw maar me mee met mij mijn na naar niet of om onder ons onze
        op over te tot u uw van voor waar wanneer wat was we welk welke wie wij ze zij zijn
    """,
    "ru": """
        а без бы был была были было в во вы где да для до его её ее ей ему если есть же за
        и из или им их к как какая какие каким какой какое каких когда кто куда ли мне
        меня мной мой моя моё мою мои моих мы на над не нет ни о об от по под при про с
        со так там то ты у уже чем что чтобы эта это этот я сколько зачем почему откуда
    """,
}
FUNCTION_WORDS: dict[str, frozenset[str]] = {
    language: frozenset(words.split()) for language, words in _LISTS.items()
}
_ELIDED = re.compile(r"^(\w+)['’](\w.*)$")  # l'operazione, qu'est, d'Elena


def split_elision(token: str) -> tuple[str, str] | None:
    """A word with an elided article or pronoun before an apostrophe: (that part, the
    rest); None for any other token."""
    found = _ELIDED.match(token)
    return (found.group(1), found.group(2)) if found else None


def function_words(tokens: list[str], english: frozenset[str]) -> frozenset[str]:
    """The function words of the language `tokens` are written in, when it is one of
    the listed languages and not English (`english`: search.py's list), else none."""
    folded = []
    for token in tokens:
        word = token.casefold()
        folded.append(word)
        if (elided := split_elision(word)) is not None:
            folded.append(elided[0])
    best, most = frozenset[str](), sum(1 for w in folded if w in english)
    for words in FUNCTION_WORDS.values():
        held = sum(1 for w in folded if w in words)
        if held > most:
            best, most = words, held
    return best
