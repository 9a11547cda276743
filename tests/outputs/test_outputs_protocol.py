"""The protocol card of a real run (protocol.json, written by every eval), and an older
run's, described from its metadata with what it cannot tell named."""

from __future__ import annotations

import json
import shutil

from rolltape.outputs.protocol import flatten, read_card
from rolltape.record import Run


def test_a_run_writes_its_card_and_reads_it_back(random_run):
    run = Run.load(random_run.path)
    card, unknown = read_card(run)
    assert unknown == []
    assert card == json.loads((random_run.path / "protocol.json").read_text())
    env = card["envs"]["env"]
    assert env["id"] == run.results.env_id and env["success_rule"] == "at_end"
    assert env["control"]["dt"] is not None and env["horizon"] is not None
    assert env["observation"] == env["policy_observation"]  # no wrappers: what the env gives
    assert card["seeds"]["base"] == run.results.seed
    assert card["policy"]["kind"] == "random"
    assert card["execution"]["batch_size"] == 1 and card["execution"]["executor"] == "local"
    assert card["simulator"] == "env"  # the env's own physics (not MuJoCo Warp's worlds)


def test_an_older_run_is_described_from_its_metadata(random_run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(random_run.path, old)
    (old / "protocol.json").write_text("{damaged")  # a damaged card counts as none
    card, unknown = read_card(Run.load(old))
    new, _ = read_card(Run.load(random_run.path))
    assert card["envs"]["env"]["id"] == new["envs"]["env"]["id"]
    assert card["envs"]["env"]["max_episode_steps"] == new["envs"]["env"]["max_episode_steps"]
    assert card["policy"]["sha256"] == new["policy"]["sha256"]
    assert any(u.startswith("control rate") for u in unknown)
    (old / "metadata.json").unlink()
    _, unknown = read_card(Run.load(old))
    assert any("metadata.json is missing" in u for u in unknown)


def test_flatten_names_each_leaf_and_walks_lists_of_objects():
    card = {"schema_version": 1, "envs": {"env": {"kwargs": {}, "w": [{"k": {"n": 3}}]}},
            "p": {"wrappers": ["a", "b"]}}
    assert list(flatten(card)) == [("envs.env.w[0].k.n", 3), ("p.wrappers", ["a", "b"])]
