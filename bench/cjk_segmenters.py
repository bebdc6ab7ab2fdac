"""Dictionary segmenters against the bigram decomposition, on the CJK evaluation set.

    .venv/bin/pip install jieba sudachipy sudachidict-core kiwipiepy   # bench only
    .venv/bin/python bench/cjk_segmenters.py [--data bench/data/cjk_eval.json]

Each candidate turns every message and question into terms; the same plain ranking is
used for all (sum of IDF over the user's own messages of the terms a message shares with
the question, term frequency 1, no reranking), so only the segmentation differs. For
each language: recall_any@1/5 of its questions, index terms per character of text (the
index size) and segmentation speed. A segmenter runs on its own language (jieba on
Chinese, SudachiPy on Japanese, Kiwi on Korean); the mixed questions use the bigrams
of hermes/state/cjk.py with Latin words for every candidate.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes.state.cjk import QUESTION_TERMS, index_terms, query_terms, runs

DEFAULT = Path(__file__).parent / "data" / "cjk_eval.json"
LANG_OF_USER = {"minji": "ko", "wei": "zh", "haruka": "ja"}
Segmenter = Callable[[str], list[str]]
_LATIN = re.compile(r"[a-z0-9][a-z0-9_.-]*", re.I)


def bigram_doc(text: str) -> list[str]:
    return index_terms(text).split() + [w.casefold() for w in _LATIN.findall(text)]


def bigram_query(text: str) -> list[str]:
    terms = [t for run in runs(text) for t in query_terms(run)]
    return terms + [w.casefold() for w in _LATIN.findall(text)]


def content_words(tokens: list[str]) -> list[str]:
    return [t for t in tokens if t.strip() and t not in QUESTION_TERMS]


def jieba_seg() -> Segmenter:
    import jieba

    jieba.setLogLevel(60)
    return lambda text: content_words([t.casefold() for t in jieba.lcut_for_search(text)])


def sudachi_seg() -> Segmenter:
    from sudachipy import Dictionary, SplitMode

    tokenizer = Dictionary().create()
    keep = ("名詞", "動詞", "形容詞", "副詞", "形状詞")

    def seg(text: str) -> list[str]:
        morphemes = tokenizer.tokenize(text, SplitMode.C)
        words = [m.normalized_form() for m in morphemes if m.part_of_speech()[0] in keep]
        return content_words([w.casefold() for w in words])

    return seg


def kiwi_seg() -> Segmenter:
    from kiwipiepy import Kiwi

    kiwi = Kiwi()

    def seg(text: str) -> list[str]:
        tokens = kiwi.tokenize(text)
        keep = [t.form for t in tokens if t.tag.startswith(("NN", "VV", "VA", "SL", "SN", "XR"))]
        return content_words([w.casefold() for w in keep])

    return seg


def rank(docs: dict[str, list[str]], question: list[str]) -> list[str]:
    """Message ids by the sum of IDF of the question terms each contains."""
    frequency: Counter[str] = Counter()
    for terms in docs.values():
        frequency.update(set(terms))
    total = len(docs)
    scores: dict[str, float] = defaultdict(float)
    for term in set(question):
        n = frequency.get(term, 0)
        if not n:
            continue
        idf = math.log(1 + (total - n + 0.5) / (n + 0.5))
        for message_id, terms in docs.items():
            if term in terms:
                scores[message_id] += idf
    return sorted(scores, key=lambda mid: (-scores[mid], mid))


def evaluate(data: dict[str, Any], name: str, seg: Segmenter | None) -> dict[str, Any]:
    by_user: dict[str, dict[str, str]] = defaultdict(dict)
    for session in data["sessions"]:
        for message in session["messages"]:
            by_user[session["user"]][message["id"]] = message["content"]
    out: dict[str, Any] = {}
    for lang in ("ko", "zh", "ja"):
        users = [u for u, code in LANG_OF_USER.items() if code == lang]
        texts = {mid: t for u in users for mid, t in by_user[u].items()}
        doc_seg = seg or bigram_doc
        started = time.perf_counter()
        docs = {mid: doc_seg(text) for mid, text in texts.items()}
        seconds = time.perf_counter() - started
        chars = sum(len(t) for t in texts.values())
        hits = {1: 0, 5: 0}
        questions = [q for q in data["questions"] if q["lang"] == lang]
        for question in questions:
            ranked = rank(docs, (seg or bigram_query)(question["query"]))
            first = next((i for i, m in enumerate(ranked) if m in question["answers"]), None)
            for k in hits:
                hits[k] += first is not None and first < k
        out[lang] = {
            "any@1": hits[1] / len(questions),
            "any@5": hits[5] / len(questions),
            "terms_per_char": sum(len(d) for d in docs.values()) / chars,
            "chars_per_s": chars / seconds if seconds else float("inf"),
        }
    return {"name": name, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT)
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    candidates: list[tuple[str, Segmenter | None, str]] = [("bigrams (cjk.py)", None, "")]
    for name, make, lang in (
        ("jieba", jieba_seg, "zh"),
        ("sudachipy", sudachi_seg, "ja"),
        ("kiwipiepy", kiwi_seg, "ko"),
    ):
        try:
            candidates.append((name, make(), lang))
        except ImportError as exc:
            print(f"{name}: not installed ({exc.name}); skipped")
    print(f"{'segmenter':18} {'lang':4} any@1  any@5  terms/char  chars/s")
    for name, seg, only in candidates:
        result = evaluate(data, name, seg)
        for lang in ("ko", "zh", "ja"):
            if only and lang != only:
                continue
            r = result[lang]
            print(
                f"{name:18} {lang:4} {r['any@1']:.3f}  {r['any@5']:.3f}  "
                f"{r['terms_per_char']:10.2f}  {r['chars_per_s']:,.0f}"
            )


if __name__ == "__main__":
    main()
