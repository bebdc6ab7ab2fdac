"""Query sanitization, ranking, CJK routing and, above all, isolation between users."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import ParsedQuery, SearchScope, parse_query


@pytest.mark.parametrize(
    ("raw", "words", "cjk"),
    [
        (
            "What did we decide about the database migration?",
            ("decide", "database", "migration"),
            (),
        ),
        ('the "blue whale" project', ("blue whale", "project"), ()),
        ('unbalanced "quote here', ("unbalanced", "quote"), ()),
        ("my-app.config.ts broke", ("my-app.config.ts", "broke"), ()),
        ("upgrade to v2.1 please", ("upgrade", "v2.1", "please"), ()),
        ("AND OR NOT", (), ()),
        ("foo AND", ("foo",), ()),
        ("NEAR(a b) col:x ^start* (paren)", ("b", "col:x", "start", "paren"), ()),
        ("tab\x00null\x1fbytes", ("tab", "null", "bytes"), ()),
        ("what is it", ("what", "is", "it"), ()),  # only stopwords: keep them rather than nothing
        ("서울에서 비빔밥", (), ("서울", "비빔", "빔밥")),  # particle off, then bigrams
        ("我喜欢饺子 and Rust", ("Rust",), ("我喜", "喜欢", "欢饺", "饺子", *"喜欢饺子")),
        ("API를 배포", ("API",), ("배포",)),
        ("猫の名前は何", (), ("猫の", "の名", "名前", "前は", "は何", "猫", "名", "前")),
        ("docker 그 포트 몇 번이었지", ("docker",), ("포트", "번이", "이었", "었지")),
        ("", (), ()),
        # the function words of the question's own language go too, elided ones included
        (
            "¿qué problema sufre la mascota en las patas?",
            ("problema", "sufre", "mascota", "patas"),
            (),
        ),
        ("quando è fissata l'operazione?", ("fissata", "operazione"), ()),
        ("qu'est-ce que je t'ai dit sur le poste ?", ("dit", "poste"), ()),
        ("Wann hat Anna Geburtstag?", ("Anna", "Geburtstag"), ()),
        ("o que houve com o menino?", ("houve", "menino"), ()),
        ("что нужно освоить для новой должности?", ("нужно", "освоить", "новой", "должности"), ()),
        ("hoe laat vertrekt de trein naar Gent?", ("laat", "vertrekt", "trein", "Gent"), ()),
        # English keeps its words that are function words elsewhere ("son", "die", "a" ...)
        ("what did my son say about the trip?", ("son", "trip"), ()),
        ("Did Caroline die in the accident?", ("Caroline", "die", "accident"), ()),
        ("my sister's car", ("sister's", "car"), ()),
        ("c'est quoi", ("c'est", "quoi"), ()),  # only function words: all kept
    ],
)
def test_parse_query(raw: str, words: tuple[str, ...], cjk: tuple[str, ...]) -> None:
    assert parse_query(raw) == ParsedQuery(words, cjk)


@given(st.text(max_size=80))
def test_any_text_is_a_valid_query(tmp_path_factory: pytest.TempPathFactory, raw: str) -> None:
    search_db, user = _shared_db(tmp_path_factory)
    search_db.conversations.search(SearchScope(user), raw)  # never raises


_CACHE: dict[str, tuple[SessionDB, str]] = {}


def _shared_db(factory: pytest.TempPathFactory) -> tuple[SessionDB, str]:
    if "db" not in _CACHE:
        from hermes.identity import new_user_id

        database = SessionDB(factory.mktemp("fuzz") / "state.db")
        user = database.people.ensure_user(new_user_id()).id
        chat = database.conversations.start_session(user, "cli", "k")
        database.conversations.add_message(
            chat.id, NewMessage("user", 'quotes " and (parens) AND or * ^ : -x')
        )
        _CACHE["db"] = (database, user)
    return _CACHE["db"]


def seed(db: SessionDB, user: str, platform: str, texts: list[str], chat_id: str = "") -> str:
    chat = db.conversations.start_session(user, platform, f"{platform}:{chat_id}", chat_id=chat_id)
    db.conversations.add_messages(
        chat.id, [NewMessage("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    )
    return chat.id


def contents(db: SessionDB, scope: SearchScope, query: str) -> list[str]:
    return [hit.content for hit in db.conversations.search(scope, query)]


def test_more_and_rarer_terms_rank_first(db: SessionDB, alice: str) -> None:
    seed(
        db,
        alice,
        "cli",
        [
            "The budget meeting is on Monday.",
            "Monday again, and another Monday meeting.",
            "Budget for the offsite in Lisbon is approved.",
            "Lunch was nice on Monday.",
        ],
    )
    scope = SearchScope(alice)
    assert contents(db, scope, "offsite budget")[0].startswith("Budget for the offsite")
    # "lisbon" is rare for this user, "monday" common: the rare term decides
    assert contents(db, scope, "monday lisbon")[0].startswith("Budget for the offsite")


def test_a_question_in_spanish_is_not_matched_by_its_articles(db: SessionDB, alice: str) -> None:
    """In a small history "el", "las" and "en" are rare enough to weigh: a message that
    shares two of them with the question outranked the one about what it asks."""
    seed(
        db,
        alice,
        "telegram",
        [
            "el coche no arranca por las mañanas, en el taller dicen que es la batería",
            "Con el frío las baterías viejas fallan más.",
            "a Luna le sangra una pata, la veterinaria dice que es un problema de uñas",
            "le pondremos una venda",
        ],
    )
    found = contents(db, SearchScope(alice), "¿qué problema sufre la mascota en las patas?")
    assert found[0].startswith("a Luna le sangra una pata")
    assert not any("coche" in hit or "frío" in hit for hit in found)


def test_idf_comes_from_the_users_own_messages(db: SessionDB, alice: str, bob: str) -> None:
    # "zelda" is rare in the whole table but in almost every message of alice's
    seed(db, bob, "cli", [f"bob message {i} about gardening" for i in range(30)])
    seed(
        db,
        alice,
        "cli",
        [
            *[f"Thanks zelda, message {i}" for i in range(12)],
            "zelda here: the kayak trip is booked for June",
        ],
    )
    assert contents(db, SearchScope(alice), "zelda kayak")[0].endswith("booked for June")


def test_a_turn_next_to_the_topic_gains_from_it(db: SessionDB, alice: str) -> None:
    chat = db.conversations.start_session(alice, "cli", "k")
    db.conversations.add_messages(
        chat.id,
        [
            NewMessage("assistant", "How was the kayak trip?"),
            NewMessage("user", "The kayak rental was cheap"),
        ],
    )
    other = db.conversations.start_session(alice, "cli", "k2")
    db.conversations.add_messages(other.id, [NewMessage("user", "A kayak poster")])
    hits = contents(db, SearchScope(alice), "kayak trip")
    # the question hands half its score to its reply (see the next test), which has its
    # own "kayak" too; both come before a message that only shares a word
    assert hits == ["The kayak rental was cheap", "How was the kayak trip?", "A kayak poster"]


@pytest.mark.parametrize(
    ("asked", "answer"),
    [
        ("What pet do you have?", "A cat called Bailey, and a dog"),
        ("你养了什么宠物？", "一只叫百利的猫"),
        ("ما هو حيوانك الأليف؟", "قطة اسمها بيلي"),
        ("¿Qué mascota tienes?", "Una gata que se llama Bailey"),
    ],
)
def test_the_reply_to_a_matching_question_comes_before_it(
    db: SessionDB, alice: str, asked: str, answer: str
) -> None:
    """A search is for what was said, not for where it was asked: a question that
    matches hands half its score to the turn after it, which ranks first although it
    shares no word with the search; a question nobody answered keeps its place."""
    chat = db.conversations.start_session(alice, "cli", "pets")
    db.conversations.add_messages(
        chat.id,
        [NewMessage("assistant", asked), NewMessage("user", answer), NewMessage("user", "ok")],
    )
    later = db.conversations.start_session(alice, "cli", "later")
    db.conversations.add_messages(later.id, [NewMessage("user", "Unrelated: the train was late")])
    hits = contents(db, SearchScope(alice), asked.strip("¿?？؟"))
    assert hits[:2] == [answer, asked]
    unanswered = db.conversations.start_session(alice, "cli", "unanswered")
    db.conversations.add_messages(unanswered.id, [NewMessage("user", "Do zebras sleep standing?")])
    assert contents(db, SearchScope(alice), "zebras sleep")[0] == "Do zebras sleep standing?"


def test_stemming_matches_word_forms(db: SessionDB, alice: str) -> None:
    seed(db, alice, "cli", ["I painted the fence on Sunday"])
    assert contents(db, SearchScope(alice), "when did I paint?") == [
        "I painted the fence on Sunday"
    ]


def test_diacritics_are_ignored(db: SessionDB, alice: str) -> None:
    seed(db, alice, "cli", ["We met at the café in Zürich"])
    assert contents(db, SearchScope(alice), "cafe zurich") == ["We met at the café in Zürich"]


def test_dotted_and_hyphenated_terms(db: SessionDB, alice: str) -> None:
    seed(db, alice, "cli", ["Edit my-app.config.ts then release v2.1", "an app with a config"])
    assert contents(db, SearchScope(alice), "my-app.config.ts")[0].startswith("Edit")
    assert contents(db, SearchScope(alice), "v2.1") == ["Edit my-app.config.ts then release v2.1"]


def test_cjk_words_of_any_length(db: SessionDB, alice: str) -> None:
    seed(
        db,
        alice,
        "telegram",
        ["지난주에 부산에서 돼지국밥을 먹었어요", "我们下周去北京看长城", "週末に京都へ行きました"],
    )
    scope = SearchScope(alice)
    assert contents(db, scope, "돼지국밥") == ["지난주에 부산에서 돼지국밥을 먹었어요"]
    assert contents(db, scope, "부산") == ["지난주에 부산에서 돼지국밥을 먹었어요"]  # 2 chars
    assert contents(db, scope, "长城") == ["我们下周去北京看长城"]
    # 京 alone is in 北京 too: the one-character match comes after the whole word
    assert contents(db, scope, "京都") == ["週末に京都へ行きました", "我们下周去北京看长城"]
    assert contents(db, scope, "北京看长城")[0] == "我们下周去北京看长城"
    assert contents(db, scope, "城")[0] == "我们下周去北京看长城"  # one character


def test_mixed_latin_and_cjk_query_fuses_both(db: SessionDB, alice: str) -> None:
    seed(
        db,
        alice,
        "cli",
        ["Kubernetes 클러스터를 업그레이드했다", "Kubernetes upgrade notes", "클러스터 비용"],
    )
    hits = contents(db, SearchScope(alice), "Kubernetes 클러스터")
    assert hits[0] == "Kubernetes 클러스터를 업그레이드했다"  # found by both indexes
    assert set(hits) == {
        "Kubernetes 클러스터를 업그레이드했다",
        "Kubernetes upgrade notes",
        "클러스터 비용",
    }


def test_another_users_unique_words_are_never_found(db: SessionDB, alice: str, bob: str) -> None:
    seed(
        db,
        bob,
        "telegram",
        ["my password hint is xylophone-armadillo", "비밀번호는 코끼리바나나", "ok"],
    )
    seed(db, alice, "cli", ["hello there"])
    for query in (
        "xylophone armadillo",
        "xylophone-armadillo",
        "코끼리바나나",
        "코끼",
        "password hint",
    ):
        assert contents(db, SearchScope(alice), query) == []
        assert contents(db, SearchScope(alice, platform="telegram"), query) == []
    assert contents(db, SearchScope(bob), "xylophone")  # sanity: bob finds his own


def test_scope_token_of_one_user_does_not_match_another(
    db: SessionDB, alice: str, bob: str
) -> None:
    seed(db, bob, "cli", ["shared words here"])
    seed(db, alice, "cli", ["shared words here"])
    hits = db.conversations.search(SearchScope(alice), "shared words")
    assert len(hits) == 1 and db.conversations.get_session(hits[0].session_id, alice) is not None


def test_group_scope_sees_only_that_chat(db: SessionDB, alice: str) -> None:
    seed(db, alice, "telegram", ["deploy notes from the DM"], chat_id="dm-1")
    seed(db, alice, "telegram", ["deploy notes from group A"], chat_id="group-a")
    seed(db, alice, "telegram", ["deploy notes from group B"], chat_id="group-b")
    assert contents(db, SearchScope(alice, chat_id="group-a"), "deploy notes") == [
        "deploy notes from group A"
    ]
    assert len(contents(db, SearchScope(alice), "deploy notes")) == 3


def test_filters_platform_role_and_excluded_session(db: SessionDB, alice: str) -> None:
    current = seed(db, alice, "cli", ["rocket launch today", "rocket answer"])
    seed(db, alice, "discord", ["rocket launch tomorrow", "rocket reply"])
    assert all(
        "tomorrow" in c or "reply" in c
        for c in contents(db, SearchScope(alice, platform="discord"), "rocket")
    )
    assert contents(db, SearchScope(alice, role="assistant", platform="cli"), "rocket") == [
        "rocket answer"
    ]
    excluded = db.conversations.search(SearchScope(alice, exclude_session_id=current), "rocket")
    assert {h.session_id for h in excluded} != {current} and all(
        h.session_id != current for h in excluded
    )


def test_the_people_with_a_match_are_found_in_one_lookup(db: SessionDB) -> None:
    """`people_matching` (what a search across people ranks): on both backends, by word
    (stemmed), phrase and CJK term, only among the people asked about."""
    said = {
        "u_00000000000000b1": "明日は東京で会議があります",
        "u_00000000000000b2": "The blue heron nests by the river",
        "u_00000000000000b3": "Nothing to see here, just the river",
        "u_00000000000000b4": "Herons everywhere near the blue lake",
    }
    for user_id, text in said.items():
        db.people.ensure_user(user_id)
        chat = db.conversations.start_session(user_id, "telegram", f"telegram:dm:{user_id}")
        db.conversations.add_message(chat.id, NewMessage("user", text))
    everyone = list(said)
    matching = db.conversations.people_matching
    assert matching("東京", everyone) == {"u_00000000000000b1"}
    assert matching("heron", everyone) == {"u_00000000000000b2", "u_00000000000000b4"}
    assert matching('"blue heron"', everyone) == {"u_00000000000000b2"}
    assert matching("river", everyone[:2]) == {"u_00000000000000b2"}  # only those asked
    assert matching("volcano", everyone) == set()
    # a word and a CJK term at once: each person found by the lookup that matched them
    assert matching("heron 東京", everyone) == {
        "u_00000000000000b1",
        "u_00000000000000b2",
        "u_00000000000000b4",
    }


def test_a_search_across_people_is_each_persons_own_search(db: SessionDB) -> None:
    """`search_people` (the dashboard's Sessions search): for every person with a match,
    exactly what their own `search` finds (enough people that PostgreSQL spreads them
    over its threads), nobody without one, nobody not asked about; `sessions_of` reads
    the sessions found, and none under another person's id."""
    people = [f"u_{n:016x}" for n in range(1, 14)]
    sessions = {}
    for n, user_id in enumerate(people):
        db.people.ensure_user(user_id)
        chat = db.conversations.start_session(user_id, "telegram", f"telegram:dm:{n}")
        sessions[user_id] = chat.id
        said = f"the otter swam {n} times" if n % 4 else "nothing about rivers today"
        db.conversations.add_messages(chat.id, [NewMessage("user", said)])
    found = db.conversations.search_people(people[:-1], "otter", 5)
    expected = {p for n, p in enumerate(people[:-1]) if n % 4}
    assert set(found) == expected
    for user_id in expected:
        own = db.conversations.search(SearchScope(user_id), "otter", 5)
        assert [(h.message_id, h.score) for h in found[user_id]] == [
            (h.message_id, h.score) for h in own
        ]
    assert db.conversations.search_people(people, "volcano", 5) == {}
    pairs = [(sessions[p], p) for p in people[:3]] + [(sessions[people[4]], people[5])]
    assert set(db.conversations.sessions_of(pairs)) == {sessions[p] for p in people[:3]}
    assert db.conversations.sessions_of([]) == {}
