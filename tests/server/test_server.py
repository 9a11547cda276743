"""The env server as a real process on a free loopback port, with real MuJoCo envs: served
tapes equal local tapes bit for bit, parity passes on the same env and names the field on
another, and every fault gets its one sentence (or its status) while the server keeps serving.
(parity's comparison itself: test_parity.py; the verbs' checks: tests/cli/test_cli_serve.py.)
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

zmq = pytest.importorskip("zmq")

from conftest import (  # noqa: E402
    Server,
    interruptible,
    kill_mid_run_then_resume,
    run_cli,
    server_stats,
)
from rolltape.server import protocol as P  # noqa: E402
from rolltape.server.client import Connection  # noqa: E402

ENV_ID = "HalfCheetah-v5"
STEPS = 30
FAST = {"ROLLTAPE_SERVER_TIMEOUT": "3"}  # a gone server is found within seconds


@pytest.fixture(scope="module")
def server():
    s = Server("--max-sessions", "3", "--max-payload", "65536")
    yield s
    s.stop()


def call(address: str, op: str, **args):
    conn = Connection(address, timeout=10)
    try:
        return conn.call(op, **args)
    finally:
        conn.close()


def sessions(address: str) -> int:
    return server_stats(address)["sessions"]


def raw(address: str, *frames: bytes) -> dict:
    """Send raw frames (not necessarily msgpack) and decode the reply."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    try:
        sock.send_multipart(list(frames))
        assert sock.poll(10_000), "no reply"
        return P.decode(sock.recv())
    finally:
        sock.close(0)
        ctx.term()


def descriptor(address: str) -> dict:
    return call(address, "describe")["descriptor"]


@pytest.fixture(scope="module")
def evals(server, tmp_path_factory):
    """The same evaluation served (2 workers: 2 sessions) and local."""
    root = tmp_path_factory.mktemp("served")
    common = ["--max-episode-steps", str(STEPS), "--episodes", "3", "--seed", "5", "-q",
              "--no-report"]
    served = run_cli("eval", f"{server.address}/{ENV_ID}", *common, "--workers", "2",
                     "--out", str(root / "served"), env=FAST)
    local = run_cli("eval", ENV_ID, *common, "--out", str(root / "local"))
    assert served.returncode == 0, served.stderr
    assert local.returncode == 0, local.stderr
    return root



def assert_same_tape(mine: Any, theirs: Any) -> None:
    """Two loaded tapes are equal bit for bit (arrays and dtypes), and their headers differ
    only in wall_s; the served one stores the local env spec, so it replays here."""
    assert mine.files == theirs.files
    for name in mine.files:
        if name != "header":
            assert mine[name].dtype == theirs[name].dtype
            assert mine[name].tobytes() == theirs[name].tobytes(), name
    a, b = (json.loads(bytes(t["header"]).decode()) for t in (mine, theirs))
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b and "served" not in b["env"]

def test_served_tapes_equal_local_tapes_bit_for_bit(evals, server):
    tapes = sorted((evals / "local" / "tapes").glob("*.npz"))
    assert len(tapes) == 3
    for path in tapes:
        mine, theirs = np.load(path), np.load(evals / "served" / "tapes" / path.name)
        assert "physics" in mine.files
        assert_same_tape(mine, theirs)
    metadata = json.loads((evals / "served" / "metadata.json").read_text())
    assert metadata["env"]["served"]["address"] == server.address
    assert sessions(server.address) == 0  # both workers closed their sessions


def test_served_tapes_verify_locally(evals):
    tape = sorted((evals / "served" / "tapes").glob("*.npz"))[-1]
    result = run_cli("verify", str(tape))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("verified") == 1


def test_parity_agrees_on_the_same_env(server, tmp_path):
    out = tmp_path / "parity.json"
    result = run_cli("parity", ENV_ID, "--served", server.address, "--max-episode-steps",
                     str(STEPS), "--episodes", "2", "--width", "64", "--height", "48",
                     "--out", str(out), env=FAST)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["agree"] and report["first_divergence"] is None
    assert [r["length"] for r in report["rows"]] == [STEPS, STEPS]
    assert report["frames"]["compared"] and report["frames"]["backend"]
    assert report["open_sessions"]["before"] == report["open_sessions"]["after"] == 0


def test_parity_draws_the_env_s_own_frame_size_and_keeps_its_report(tmp_path):
    """Without --width/--height the terminal frames are the env's own size, as render's are
    (parity drew 480x480 whatever the env's size); a second run refuses to replace the
    report unless told to, as render refuses to replace a video."""
    out = tmp_path / "parity.json"
    small = ("--env-kwargs", "width=40", "--env-kwargs", "height=32")
    narrow = Server(*small)  # an env whose own frames are 40 x 32
    try:
        args = ["parity", ENV_ID, "--served", narrow.address, "--max-episode-steps",
                str(STEPS), "-n", "1", *small, "--out", str(out)]
        result = run_cli(*args)  # a new frame size: the server may take seconds to draw
        assert result.returncode == 0, result.stderr
        report = json.loads(out.read_text())
        assert report["agree"] and report["frames"]["compared"]
        assert (report["frames"]["width"], report["frames"]["height"]) == (40, 32)
        again = run_cli(*args)
    finally:
        narrow.stop()
    assert again.returncode == 2 and "already exists; pass --overwrite" in again.stderr
    assert json.loads(out.read_text()) == report


def test_parity_replays_the_actions_of_tapes(server, evals, tmp_path):
    tapes = sorted((evals / "local" / "tapes").glob("*.npz"))[:2]
    out = tmp_path / "parity.json"
    args = [a for t in tapes for a in ("--tape", str(t))]
    result = run_cli("parity", ENV_ID, "--served", server.address, "--max-episode-steps",
                     str(STEPS), *args, "--no-frames", "--out", str(out), env=FAST)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["agree"] and [r["seed"] for r in report["rows"]] == [5, 6]
    assert [r["tape"] for r in report["rows"]] == [str(t) for t in tapes]


def test_a_server_with_other_kwargs_is_refused_and_parity_names_the_field(tmp_path):
    other = Server("--env-kwargs", "ctrl_cost_weight=0.2")
    try:
        out = tmp_path / "parity.json"
        result = run_cli("parity", ENV_ID, "--served", other.address, "--max-episode-steps",
                         str(STEPS), "--episodes", "1", "--out", str(out), env=FAST)
        assert result.returncode == 1, result.stderr
        first = json.loads(out.read_text())["first_divergence"]
        assert first["field"] == "kwargs"
        assert first["local"] == {} and first["served"] == {"ctrl_cost_weight": 0.2}
        assert "kwargs" in result.stderr and "ctrl_cost_weight" in result.stderr

        run = run_cli("eval", f"{other.address}/{ENV_ID}", "--max-episode-steps", str(STEPS),
                      "--episodes", "1", "--out", str(tmp_path / "run"), env=FAST)
        assert run.returncode == 2
        line = run.stderr.strip()
        assert "\n" not in line and "differs in kwargs" in line and "0.2" in line
        assert not (tmp_path / "run").exists()  # nothing half-written
        # A client whose spaces-and-all descriptor differs is refused at open, before a step.
        mine = dict(descriptor(other.address), kwargs={})
        reply = call(other.address, "open", expect=mine)
        assert reply["status"] == P.INCOMPATIBLE and "kwargs" in reply["error"]
    finally:
        other.stop()


@pytest.mark.parametrize("signum, status, heading", [
    (signal.SIGINT, 130, "Interrupted: "), (signal.SIGTERM, 143, "Interrupted (SIGTERM): ")])
def test_a_signal_in_parity_writes_nothing_and_closes_its_session(server, tmp_path, signum,
                                                                  status, heading):
    """Ctrl-C or SIGTERM (parity had no SIGTERM handler: killed with no word, its worker
    and session left): one line, 130/143, its worker gone, its session closed."""
    out = tmp_path / "parity.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolltape.cli", "parity", ENV_ID, "--served", server.address,
         "--max-episode-steps", str(STEPS), "-n", "500", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **FAST, "PYTHONUNBUFFERED": "1"},
        preexec_fn=interruptible, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith("episode 0 ")  # it is comparing episodes
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = stderr.strip().splitlines()
    assert proc.returncode == status and len(lines) == 1, stderr
    assert lines[0].startswith(f"rolltape: {heading}`rolltape parity` stopped") and not out.exists()
    with pytest.raises(ProcessLookupError):  # its worker (same session) is gone too
        os.killpg(proc.pid, 0)
    assert sessions(server.address) == 0  # the stopped worker closed its session


@pytest.mark.parametrize("trial, workers", [(0, 2), (1, 2), (2, 2), (0, 1), (1, 1)])
def test_ctrl_c_in_a_served_eval_closes_every_session(server, tmp_path, trial, workers):
    """Its stopped pass-1 workers close their sessions at once (before, in 4 of 8 trials a
    session stayed until the idle timeout and a small --max-sessions answered BUSY). One
    worker on this --max-sessions 3 server plays 2 episodes at once (pass1.inflight): it
    closes both sessions."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolltape.cli", "eval", f"{server.address}/{ENV_ID}",
         "--max-episode-steps", str(STEPS), "-n", "400", "--workers", str(workers),
         "--out", str(out), "-q", "--no-report"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **FAST}, preexec_fn=interruptible)
    try:
        log = out.with_name(f".{out.name}.partial") / "episodes.jsonl"
        deadline = time.monotonic() + 60
        # episodes finished, and both sessions open (2 workers x 1 session, or 1 worker x 2):
        # the first worker may finish several episodes before the second has started
        while not (log.is_file() and log.read_text().count("\n") >= 2 + trial
                   and sessions(server.address) == 2):
            assert time.monotonic() < deadline and proc.poll() is None, \
                f"not 2 sessions with episodes finished ({sessions(server.address)} open)"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "--resume" in stderr
    assert sessions(server.address) == 0  # none left for the idle timeout to free


def test_bad_messages_get_an_error_and_the_server_keeps_serving(server):
    address = server.address
    pickled = pickle.dumps({"op": "describe"})
    for frames in ([b"\xff\x00garbage"], [pickled], [P.encode({"op": "describe"})[:-3]],
                   [json.dumps({"op": "describe"}).encode()], [b"x" * 70_000],
                   [P.encode({"op": "launch"})], [P.encode(["op", "describe"])],
                   [b"a", b"b", b"c"], [P.encode({"op": "describe", "rid": "1"})]):
        reply = raw(address, *frames)
        assert reply["status"] == P.ERROR, frames[0][:20]
        assert reply["error"]
    assert "unknown op" in raw(address, P.encode({"op": "launch"}))["error"]
    assert "cap" in raw(address, b"x" * 70_000)["error"]
    no_rid = raw(address, P.encode({"op": "step", "sid": "s", "gen": 0, "action": [0.0]}))
    assert no_rid["error"] == "a 'step' request needs 'rid', an integer"  # not "KeyError"
    assert call(address, "describe")["status"] == P.OK  # still serving


def test_a_render_of_a_camera_the_model_lacks_is_refused(server):
    """Gymnasium's renderer draws its free camera for an unknown name: parity --camera
    TYPO compared another view than asked."""
    conn = Connection(server.address, timeout=30)
    try:
        desc = conn.call("describe")["descriptor"]
        sid = conn.call("open", expect=desc)["sid"]
        gen = conn.call("reset", sid=sid, seed=0)["gen"]
        bad = conn.call("render", sid=sid, gen=gen, width=32, height=32, camera="trakc")
        assert bad["status"] == P.ERROR and "no camera 'trakc'" in bad["error"], bad
        assert "track" in bad["error"]  # HalfCheetah's own camera is named
        good = conn.call("render", sid=sid, gen=gen, width=32, height=32, camera="track")
        assert good["status"] == P.OK and good["frame"].shape == (32, 32, 3)
        conn.call("close", sid=sid, gen=gen)
    finally:
        conn.close()


def test_stale_busy_and_bad_actions(server):
    address = server.address
    conn = Connection(address, timeout=10)
    try:
        opened = conn.call("open", expect=descriptor(address))
        sid, gen = opened["sid"], opened["gen"]
        assert conn.call("step", sid=sid, gen=gen, action=np.zeros(6))["status"] == P.ERROR
        reset = conn.call("reset", sid=sid, gen=gen, seed=1)
        assert reset["status"] == P.OK and reset["gen"] == gen + 1
        gen = reset["gen"]
        for action, word in ((np.zeros(5), "shape"), (np.zeros(6, dtype=bool), "dtype"),
                             ("left", "array")):
            reply = conn.call("step", sid=sid, gen=gen, action=action)
            assert reply["status"] == P.ERROR and word in reply["error"]
        assert conn.call("step", sid=sid, gen=gen, action=np.zeros(6))["status"] == P.OK
        # A repeated request id is STALE, never replayed; so is an old generation.
        message = P.request("step", sid=sid, gen=gen, rid=conn.rid, action=np.zeros(6))
        assert raw(address, P.encode(message))["status"] == P.STALE
        assert conn.call("step", sid=sid, gen=gen - 1, action=np.zeros(6))["status"] == P.STALE
        state = conn.call("state", sid=sid, gen=gen)
        assert state["status"] == P.OK and state["physics"].dtype == np.float64
        # BUSY past --max-sessions 3.
        more = [conn.call("open", expect=descriptor(address)) for _ in range(3)]
        assert [m["status"] for m in more] == [P.OK, P.OK, P.BUSY]
        assert "max-sessions" in more[-1]["error"]
        for m in more[:2] + [opened]:
            assert conn.call("close", sid=m["sid"], gen=0)["status"] == P.OK
        assert conn.call("close", sid=sid, gen=gen)["status"] == P.STALE  # closed already
    finally:
        conn.close()
    assert sessions(address) == 0


def test_token_idle_timeout_and_graceful_stop(tmp_path):
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    s = Server("--token-file", str(token), "--idle-timeout", "1")
    try:
        assert call(s.address, "describe")["status"] == P.UNAUTHORIZED
        assert call(s.address, "describe", )["status"] == P.UNAUTHORIZED
        conn = Connection(s.address, token="0123456789abcdef0123456789abcdeX", timeout=10)
        assert conn.call("describe")["status"] == P.UNAUTHORIZED
        conn.close()
        good = Connection(s.address, token=token.read_text().strip(), timeout=10)
        desc = good.call("describe")["descriptor"]
        # A client that vanishes: its session is closed by the idle timeout.
        assert good.call("open", expect=desc)["status"] == P.OK
        assert good.call("stats")["sessions"] == 1
        deadline = time.monotonic() + 10
        while good.call("stats")["sessions"] and time.monotonic() < deadline:
            time.sleep(0.3)
        assert good.call("stats")["sessions"] == 0
        # Wrong token through the CLI: one sentence, exit 2.
        bad = tmp_path / "bad"
        bad.write_text("not-the-token-but-long-enough")
        run = run_cli("eval", f"{s.address}/{ENV_ID}", "--max-episode-steps", str(STEPS),
                      "--episodes", "1", "--out", str(tmp_path / "run"),
                      env={**FAST, "ROLLTAPE_TOKEN_FILE": str(bad)})
        assert run.returncode == 2 and "token" in run.stderr and "Traceback" not in run.stderr
        assert "is not this server's" in run.stderr  # wrong, not missing: says which
        assert "needs its token" in call(s.address, "describe")["error"]
        # The token is read before the message is decoded: a stranger's message is refused
        # unexpanded (here one that decoding would refuse for its unknown extension).
        import msgpack

        stranger = msgpack.packb({"op": "describe", "rid": 1, "token": "x" * 32,
                                  "junk": msgpack.ExtType(99, b"\0" * 100_000)})
        assert raw(s.address, stranger)["status"] == P.UNAUTHORIZED
        assert P.peek_token(msgpack.packb({"op": "step", "blob": b"x" * 70_000,
                                           "token": "t" * 32})) is None  # too far in
        assert good.call("open", expect=desc)["status"] == P.OK
        good.close()
    finally:
        out = s.stop(signal.SIGTERM)
    assert s.proc.returncode == 143  # as any verb stopped by SIGTERM
    assert "closed 1 session(s)" in out  # SIGTERM closed the open env
    assert "refused 1 request(s) with a missing token so far" in out  # refusals are logged
    assert "Interrupted (SIGTERM): stopped serving" in out.splitlines()[-1]


def test_a_hung_env_call_is_cut_by_the_request_timeout():
    """A step that hangs is answered ERROR after --request-timeout, its session is closed,
    and the server goes on serving."""
    assets = Path(__file__).resolve().parents[1] / "assets"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rolltape.cli", "serve", "toy_envs:FaultToy-v0", "--env-kwargs",
         "fault='hang'", "--bind", "127.0.0.1:0", "--request-timeout", "1"], cwd=assets,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(  # absolute: the cwd changes
            os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        address = next(w for w in line.split() if w.startswith("tcp://"))
        conn = Connection(address, timeout=20)
        opened = conn.call("open", expect=descriptor(address))
        sid = opened["sid"]
        gen = conn.call("reset", sid=sid, gen=0, seed=0)["gen"]
        action = np.zeros(1, np.float32)
        assert [conn.call("step", sid=sid, gen=gen, action=action)["status"]
                for _ in range(2)] == [P.OK, P.OK]
        started = time.monotonic()
        hung = conn.call("step", sid=sid, gen=gen, action=action)
        assert hung["status"] == P.ERROR and "more than 1 s" in hung["error"]
        assert time.monotonic() - started < 10
        assert conn.call("step", sid=sid, gen=gen, action=action)["status"] == P.STALE
        assert conn.call("stats")["sessions"] == 0
        conn.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_bind_faults_are_one_sentence(server, tmp_path):
    port = server.address.rpartition(":")[2]
    busy = run_cli("serve", ENV_ID, "--bind", f"127.0.0.1:{port}")
    assert busy.returncode == 2 and "in use" in busy.stderr
    open_bind = run_cli("serve", ENV_ID, "--bind", "0.0.0.0:0")
    assert open_bind.returncode == 2 and "--token-file" in open_bind.stderr
    short = tmp_path / "short"
    short.write_text("abc")
    weak = run_cli("serve", ENV_ID, "--bind", "127.0.0.1:0", "--token-file", str(short))
    assert weak.returncode == 2 and "at least 16" in weak.stderr
    for result in (busy, open_bind, weak):
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    loop = subprocess.Popen([sys.executable, "-m", "rolltape.cli", "serve", ENV_ID, "--bind",
                             "127.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # 127.1 is loopback: no token needed
    try:
        assert loop.stdout.readline().startswith("serving"), "127.1 was refused"
    finally:
        loop.terminate()
        loop.communicate(timeout=30)


def test_unreachable_server_is_one_sentence_within_the_timeout(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    result = run_cli("eval", f"tcp://127.0.0.1:{port}/{ENV_ID}", "--episodes", "1",
                     "--out", str(tmp_path / "run"), env={"ROLLTAPE_SERVER_TIMEOUT": "2"})
    assert result.returncode == 2 and "No env server answers" in result.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "run").exists()
    from rolltape.envs.ids import env_spec
    from rolltape.errors import UsageError

    for bad in ("tcp://127.0.0.1/HalfCheetah-v5", "tcp://127.0.0.1:7450", "tcp://:1/X"):
        with pytest.raises(UsageError, match="HOST:PORT"):
            env_spec(bad)


def test_a_server_killed_mid_run_stops_the_eval_and_resume_finishes(evals, tmp_path):
    """Long episodes so the kill lands mid-run: finished episodes are kept, --resume (on
    a new server) plays the rest, and the tapes equal a local run's."""
    out = tmp_path / "run"
    args = ["--max-episode-steps", str(STEPS), "--episodes", "12", "--seed", "5", "-q",
            "--no-report", "--out", str(out)]
    kill_mid_run_then_resume(Server, ENV_ID, args, out, at_least=2, episodes=12)
    for path in sorted((evals / "local" / "tapes").glob("*.npz")):  # the same seeds
        for name in ("actions", "rewards", "physics"):
            assert np.load(path)[name].tobytes() == np.load(out / "tapes" / path.name)[name].tobytes()


def test_a_plain_install_names_the_extra():
    code = ("import sys; sys.modules['zmq'] = None; sys.modules['msgpack'] = None; "
            "from rolltape.cli import main; sys.exit(main(sys.argv[1:]))")
    for args in (["serve", ENV_ID], ["eval", f"tcp://127.0.0.1:7450/{ENV_ID}", "-n", "1",
                                     "--out", "/nonexistent-never-written"]):
        result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        assert "rolltape[server]" in result.stderr and result.stderr.count("\n") == 1


SUITE_ENVS = Path(__file__).parents[1] / "assets" / "suite_envs.py"


def suite_manifest(path: Path, ctrl_cost_weight: float = 0.2) -> Path:
    """Three tasks: a toy env (no MuJoCo), HalfCheetah with kwargs and a short horizon,
    and CartPole (which the suite server below leaves out with --tasks)."""
    path.write_text(f"""toy:
  tasks:
    pattern:
      env: {SUITE_ENVS}:SuccessPattern
      kwargs: {{report: end, steps: 6}}
    cheetah:
      env: {ENV_ID}
      kwargs: {{ctrl_cost_weight: {ctrl_cost_weight}}}
      max_episode_steps: 20
      success_key: null
    cartpole: CartPole-v1
""")
    return path


@pytest.fixture(scope="module")
def suite_server(tmp_path_factory):
    manifest = suite_manifest(tmp_path_factory.mktemp("suite") / "toy.yaml")
    s = Server("--max-sessions", "4", what=("--suite", str(manifest), "--tasks",
                                            "pattern,cheetah"))
    yield s, manifest
    s.stop()


def test_a_served_suite_tapes_equal_a_local_suite_run_bit_for_bit(suite_server, tmp_path):
    server, manifest = suite_server
    common = ["--suite", str(manifest), "--tasks", "pattern,cheetah", "--episodes", "2",
              "--seed", "3", "-q", "--no-report"]
    served = run_cli("eval", *common, "--served", server.address, "--workers", "2",
                     "--out", str(tmp_path / "served"), env=FAST)
    local = run_cli("eval", *common, "--out", str(tmp_path / "local"))
    assert served.returncode == 0, served.stderr
    assert local.returncode == 0, local.stderr
    tapes = sorted((tmp_path / "local" / "tapes").rglob("*.npz"))
    assert [p.parent.name for p in tapes] == ["cheetah"] * 2 + ["pattern"] * 2
    for path in tapes:
        mine = np.load(path)
        theirs = np.load(tmp_path / "served" / path.relative_to(tmp_path / "local"))
        assert ("physics" in mine.files) == (path.parent.name == "cheetah")
        assert_same_tape(mine, theirs)
    results = [json.loads((tmp_path / run / "results.json").read_text())["suite"]["per_task"]
               for run in ("local", "served")]
    assert results[0] == results[1]
    assert sessions(server.address) == 0
    # Each served name describes its own env; a one-env request names one.
    reply = call(server.address, "describe", env="toy/cheetah")
    assert reply["descriptor"]["kwargs"] == {"ctrl_cost_weight": 0.2}
    assert reply["envs"] == ["toy/pattern", "toy/cheetah"]
    assert call(server.address, "describe")["status"] == P.INCOMPATIBLE


def test_a_served_suite_refuses_a_differing_or_missing_task(suite_server, tmp_path):
    server, manifest = suite_server
    other = suite_manifest(tmp_path / "other.yaml", ctrl_cost_weight=0.3)
    cases = {
        "kwargs": (["--suite", str(other), "--tasks", "pattern,cheetah", "--served",
                    server.address], "for task 'toy/cheetah': the served env differs in kwargs: this side "
                   'expects {"ctrl_cost_weight": 0.3}, the server has {"ctrl_cost_weight": 0.2}'),
        "missing": (["--suite", str(manifest), "--served", server.address],
                    "does not serve task 'toy/cartpole' (it serves toy/pattern, toy/cheetah)"),
        "one env": ([f"{server.address}/{ENV_ID}"], "serves several envs"),
        "no suite": ([ENV_ID, "--served", server.address], "give --suite too"),
    }
    for case, (args, sentence) in cases.items():
        out = tmp_path / case.replace(" ", "-")
        result = run_cli("eval", *args, "-n", "1", "-q", "--out", str(out), env=FAST)
        assert result.returncode == 2, (case, result.stderr)
        assert sentence in result.stderr and result.stderr.count("\n") == 1, (case, result.stderr)
        assert not out.exists(), case  # refused before any work
    assert sessions(server.address) == 0


def test_parity_compares_one_task_of_a_suite_server(suite_server, tmp_path):
    server, manifest = suite_server
    out = tmp_path / "parity.json"
    done = run_cli("parity", "--suite", str(manifest), "--task", "cheetah", "--served",
                   server.address, "--episodes", "2", "--width", "64", "--height", "48",
                   "--out", str(out), env=FAST)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["agree"] is True and len(result["rows"]) == 2
    assert result["task"] == "toy/cheetah"
    assert result["env"]["kwargs"] == {"ctrl_cost_weight": 0.2}
    for args, sentence in (([], "go together"), (["--task", "cheetah,pattern"], "one task"),
                           ([ENV_ID, "--task", "cheetah"], "not both"),
                           (["--task", "cartpole"], "does not serve task 'toy/cartpole'")):
        refused = run_cli("parity", *args, "--suite", str(manifest), "--served", server.address,
                          "--out", str(tmp_path / "no.json"), env=FAST)
        assert refused.returncode == 2 and sentence in refused.stderr, (args, refused.stderr)
        assert refused.stderr.count("\n") == 1 and not (tmp_path / "no.json").exists()
    assert sessions(server.address) == 0


def test_a_one_env_url_naming_a_suite_task_says_how_to_evaluate_it(tmp_path):
    done = run_cli("eval", "tcp://127.0.0.1:7450/mazes/umaze", "-n", "1", "--out",
                   str(tmp_path / "run"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--suite MANIFEST --tasks umaze --served tcp://127.0.0.1:7450" in done.stderr
