"""Dealing pass-1 episodes a piece at a time (rolltape.pass1.dealer): every episode is dealt
once whatever the order workers ask in, a worker plays its own share first, and one that
runs out takes the last piece of the share with the most left. Real runs: the tapes do not
depend on how episodes were dealt."""

from __future__ import annotations

import random

import pytest

from rolltape.pass1.dealer import PIECE_MAX, Dealer, piece_size
from rolltape.pass1.rollout import Episodes, PolicyJob, split_jobs


def _jobs(*counts: int) -> list[PolicyJob]:
    """One job per count (a suite's tasks), episodes 0..count-1 each."""
    return [PolicyJob(env={"id": "CartPole-v1"}, policy="random", extra_meta={"task": str(t)},
                      episodes=Episodes("policy", range(n), seed=0, tapes="tapes"))
            for t, n in enumerate(counts)]


def _dealt(piece: list[PolicyJob]) -> list[tuple[str, int]]:
    return [(job.extra_meta["task"], e.index) for job in piece for e in job.episodes]


@pytest.mark.parametrize("counts", [(1,), (7,), (100,), (3, 5, 1), (40, 2, 17)])
@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_every_episode_is_dealt_once_whatever_order_workers_ask_in(counts, workers):
    jobs = _jobs(*counts)
    shares = split_jobs(jobs, workers)
    rng = random.Random(sum(counts) * workers)
    dealer = Dealer(shares, piece_size(sum(counts), len(shares)))
    seen, asking = [], list(range(len(shares)))
    while asking:
        w = rng.choice(asking)
        piece = dealer(w)
        if piece is None:
            asking.remove(w)
        else:
            seen += _dealt(piece)
    assert sorted(seen) == sorted((str(t), i) for t, n in enumerate(counts) for i in range(n))


def test_a_worker_plays_its_own_share_first_then_takes_from_the_fullest():
    shares = split_jobs(_jobs(9), 3)  # worker w: episodes w, w+3, w+6
    dealer = Dealer(shares, piece=1)
    assert [_dealt(dealer(0)) for _ in range(3)] == [[("0", 0)], [("0", 3)], [("0", 6)]]
    assert _dealt(dealer(2)) == [("0", 2)]
    assert _dealt(dealer(0)) == [("0", 7)]  # worker 1's share has the most left: its last
    assert _dealt(dealer(0)) == [("0", 4)]  # 1 and 2 have two each: the first of them
    assert _dealt(dealer.playing[0]) == [("0", 4)]
    assert [_dealt(dealer(1)), _dealt(dealer(2)), _dealt(dealer(1))] == \
        [[("0", 1)], [("0", 5)], [("0", 8)]]
    assert dealer(0) is dealer(1) is dealer(2) is None and dealer.playing[0] == []


def test_pieces_are_about_a_sixteenth_of_a_share_and_never_huge():
    assert piece_size(8, 2) == 1 and piece_size(1, 8) == 1
    assert piece_size(3200, 2) == 64 == PIECE_MAX and piece_size(10**12, 2) == PIECE_MAX
    shares = split_jobs(_jobs(10**12), 2)  # dealt lazily: nothing built per episode
    assert len(_dealt(Dealer(shares, PIECE_MAX)(1))) == PIECE_MAX


def test_tapes_do_not_depend_on_how_episodes_were_dealt(tmp_path):
    """CartPole's random episodes differ in length, so two workers trade pieces; every tape
    equals the one a single worker records."""
    from rolltape import Tape, evaluate

    runs = {w: evaluate("CartPole-v1", "random", episodes=12, seed=4, workers=w,
                        out=tmp_path / str(w), report=False) for w in (1, 2)}
    lengths = {e.length for e in runs[1].results.episodes}
    assert len(lengths) > 3
    for e1, e2 in zip(runs[1].results.episodes, runs[2].results.episodes):
        a, b = Tape.load(runs[1].tape_path(e1)), Tape.load(runs[2].tape_path(e2))
        assert (a.seed, a.length) == (b.seed, b.length)
        assert (a.actions == b.actions).all() and (a.obs_digest == b.obs_digest).all()
