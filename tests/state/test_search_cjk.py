"""Korean, Chinese and Japanese search: questions written as people write them (no
spaces), mixed with English, one-character words, particles that must not dominate,
answers that follow a question, the upgrade of an older database, and isolation between
users who share vocabulary, on the CJK index too."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from sqlalchemy import text

from hermes.identity import new_user_id
from hermes.state import engine as eng
from hermes.state.db import SessionDB
from hermes.state.schema import SCHEMA_VERSION
from hermes.state.search import SearchScope
from tests.state.test_search import contents, seed

ROOT = Path(__file__).resolve().parents[2]


def test_questions_without_spaces_find_what_was_said(db: SessionDB, alice: str) -> None:
    seed(
        db,
        alice,
        "telegram",
        [
            "数据库我们决定每天凌晨两点用 pg_dump 做全量备份，然后上传到阿里云 OSS",
            "好的",
            "手机照片我每周日备份到群晖 NAS 上",
            "好的",
            "来月、横浜の新しいマンションに引っ越すことになった",
            "おめでとう",
            "회사 서버에서 postgres 도커 컨테이너 포트를 5433으로 바꿨어",
            "좋아요",
            "redis는 그대로 6379 쓰고 있어",
            "포트폴리오 사이트 리뉴얼했어",
        ],
    )
    scope = SearchScope(alice)
    # the example: it no longer has to appear verbatim; the shared words find it
    assert contents(db, scope, "我上次说的数据库备份方案是什么")[0].startswith("数据库")
    assert contents(db, scope, "照片备份到哪里")[0].startswith("手机照片")
    assert contents(db, scope, "引っ越し先はどこだっけ")[0].startswith("来月")
    assert contents(db, scope, "docker 그 포트 몇 번이었지")[0].startswith("회사 서버")
    assert contents(db, scope, "redis 포트 뭐였지")[0].startswith("redis는")  # glued word


def test_particles_and_common_characters_do_not_outrank_the_words_that_matter(
    db: SessionDB, alice: str
) -> None:
    noise = [f"今日の天気は晴れの予報で、気分は{n}点の日" for n in range(12)]
    seed(db, alice, "telegram", [*noise, "うちの猫の名前はモチ"])
    assert contents(db, SearchScope(alice), "猫の名前は")[0] == "うちの猫の名前はモチ"
    chinese = [f"我的同事的电脑是新的，他的桌子是白色的{n}" for n in range(12)]
    seed(db, alice, "telegram", [*chinese, "我女儿叫小雨"])
    assert contents(db, SearchScope(alice), "我的女儿叫什么")[0] == "我女儿叫小雨"


def test_the_answer_to_a_question_comes_with_it(db: SessionDB, alice: str) -> None:
    seed(
        db,
        alice,
        "telegram",
        ["다음 달에 성수동으로 이사 가", "이사 날짜는 정해졌나요?", "11월 23일 토요일"],
    )
    assert "11월 23일 토요일" in contents(db, SearchScope(alice), "이사하는 날짜 언제야")[:5]


def test_users_who_share_vocabulary_never_see_each_others_messages(
    db: SessionDB, alice: str, bob: str
) -> None:
    shared = ["我对花生过敏", "猫の名前はモチ", "도커 포트 5433", "redis는 6379"]
    seed(db, alice, "telegram", [f"{text} (alice)" for text in shared])
    seed(db, bob, "telegram", [f"{text} (bob)" for text in shared])
    for query in ("花生过敏", "过", "猫の名前", "猫", "도커 포트", "포", "redis 6379"):
        found = contents(db, SearchScope(alice), query)
        assert found and all("(alice)" in text for text in found), (query, found)
        found = contents(db, SearchScope(bob), query)
        assert found and all("(bob)" in text for text in found), (query, found)
    assert contents(db, SearchScope(alice), "花生 bob") == contents(db, SearchScope(alice), "花生")


def test_a_merge_moves_the_cjk_index_with_the_messages(db: SessionDB, alice: str, bob: str) -> None:
    seed(db, bob, "telegram", ["弟が来年の春に結婚する"])
    with db.engine.begin() as conn:  # what a merge does to the rows
        sql = text("UPDATE messages SET user_id = :a WHERE user_id = :b")
        conn.execute(sql, {"a": alice, "b": bob})
    assert contents(db, SearchScope(alice), "弟の結婚") == ["弟が来年の春に結婚する"]
    assert contents(db, SearchScope(bob), "弟の結婚") == []


def test_an_older_database_gains_the_cjk_index_on_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old = eng.open_engine(path)
    eng.migrate_to(old, 8)  # the last schema with the trigram index
    old.dispose()
    raw = sqlite3.connect(path)
    user = new_user_id()
    raw.execute("INSERT INTO users(id, created_at) VALUES (?, '2026-01-01')", (user,))
    raw.execute(
        "INSERT INTO sessions(id, session_key, user_id, platform, started_at, last_active_at)"
        " VALUES ('s_00000000000000aa', 'k', ?, 'cli', '2026-01-01', '2026-01-01')",
        (user,),
    )
    raw.execute(
        "INSERT INTO messages(session_id, user_id, platform, role, content, created_at) VALUES "
        "('s_00000000000000aa', ?, 'cli', 'user', '春节打算带爸妈去日本大阪玩五天', '2026-01-01')",
        (user,),
    )
    raw.commit()
    raw.close()
    db = SessionDB(path)
    assert db.upgraded_from == 8 and db.upkeep.schema_version() == SCHEMA_VERSION
    assert contents(db, SearchScope(user), "带父母去日本玩几天") == [
        "春节打算带爸妈去日本大阪玩五天"
    ]
    with db.engine.connect() as conn:
        tables = {r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master")}
    assert "messages_tri" not in tables and "messages_cjk" in tables
    assert db.upkeep.integrity_check() == "ok"
    db.close()


def test_the_evaluation_set_keeps_its_recall() -> None:
    """bench/cjk_recall.py on bench/data/cjk_eval.json: every language at 0.9 or more at
    5 (the aim of the issue; the README has the figures)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import cjk_recall
    finally:
        sys.path.pop(0)
    data = json.loads((ROOT / "bench" / "data" / "cjk_eval.json").read_text(encoding="utf-8"))
    by = cjk_recall.evaluate(data)["by"]
    for lang in ("ko", "zh", "ja", "mixed"):
        assert by[lang]["recall_any@5"] >= 0.9, (lang, by[lang])


def test_a_pasted_page_of_cjk_text_is_a_bounded_search(db: SessionDB, alice: str) -> None:
    from hermes.state.search import MAX_CJK_LOOKUPS, parse_query

    seed(db, alice, "telegram", ["数据库备份方案是每天凌晨两点"])
    page = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(3000))  # all different
    assert len(parse_query(page).cjk) > MAX_CJK_LOOKUPS  # more terms than are looked up
    assert contents(db, SearchScope(alice), "数据库备份" + page)[0].startswith("数据库")
