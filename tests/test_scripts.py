"""Scripts of a text, the probe pairs, the separation score and a question's trust."""

from __future__ import annotations

import math
import random
import re

import pytest

from hermes.scripts import PROBES, script_of, script_shares, separation, trust
from hermes.state.search import STOPWORDS


@pytest.mark.parametrize(
    ("char", "script"),
    [
        ("a", "Latin"),
        ("é", "Latin"),
        ("я", "Cyrillic"),
        ("λ", "Greek"),
        ("ع", "Arabic"),
        ("ש", "Hebrew"),
        ("क", "Devanagari"),
        ("ก", "Thai"),
        ("中", "Han"),
        ("か", "Kana"),
        ("カ", "Kana"),
        ("한", "Hangul"),
        ("ა", "Georgian"),  # a script without probes keeps its own name
        ("1", None),
        ("!", None),
        (" ", None),
        ("🙂", None),
    ],
)
def test_script_of_a_character(char: str, script: str | None) -> None:
    assert script_of(char) == script


def test_shares_count_letters_only() -> None:
    assert script_shares("docker 포트 8080!") == {"Latin": 0.75, "Hangul": 0.25}
    assert script_shares("１２３ !!") == {}


def test_every_script_has_eight_pairs_written_in_it() -> None:
    for script, pairs in PROBES.items():
        assert len(pairs) == 8, script
        for pair in pairs:
            for half in pair:
                shares = script_shares(half)
                # Japanese probes are all kana; Latin loan letters nowhere
                assert shares.get(script, 0.0) >= 0.9, (script, half)


def test_the_halves_of_a_pair_share_no_content_word() -> None:
    """Where words are separated by spaces: a pair must be matched by meaning."""
    for script in ("Latin", "Cyrillic", "Greek"):
        for a, b in PROBES[script]:
            words = [set(re.findall(r"\w{4,}", h.casefold())) - STOPWORDS for h in (a, b)]
            assert not words[0] & words[1], (a, b)


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def test_separation_is_one_when_every_pair_is_found_and_zero_at_chance() -> None:
    rng = random.Random(7)
    meanings = [unit([rng.gauss(0, 1) for _ in range(32)]) for _ in range(8)]
    noisy = [unit([x + rng.gauss(0, 0.05) for x in m]) for m in meanings]
    assert separation(meanings + noisy) == 1.0
    same = [[1.0, 0.0]] * 16  # a model that maps everything to one point
    assert separation(same) == 0.0
    shifted = meanings + noisy[1:] + noisy[:1]  # every pair matched to another's half
    assert separation(shifted) == 0.0


def test_trust_averages_the_letters_scripts() -> None:
    coverage = {"Latin": 1.0, "Han": 0.0, "Hangul": 0.5}
    assert trust("where is my car", coverage) == 1.0
    assert trust("数据库的端口", coverage) == 0.0
    assert trust("docker 포트", coverage) == pytest.approx(6 / 8 + 0.5 * 2 / 8)
    assert trust("ვახშამი", coverage) == 0.0  # unprobed: as the weakest measured
    assert trust("8080", coverage) == 1.0  # no letters: nothing to judge
    assert trust("数据库", None) == 1.0  # not measured (yet): as before
