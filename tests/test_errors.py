"""The error types users see (rolltape.errors): each carries the exit status the CLI gives
it, a stop by a signal is no Exception, and an enumerated option names what it may be."""

from __future__ import annotations

import signal

import pytest

from rolltape.errors import DivergenceError, Interrupted, RunFailed, UsageError, check_choice


@pytest.mark.parametrize(("error", "status"), [
    (UsageError("bad flag"), 2), (DivergenceError("diverged"), 1), (RunFailed("crashed"), 1),
    (Interrupted(signal.SIGTERM), 143), (Interrupted(signal.SIGINT), 130)])
def test_each_error_carries_the_exit_status_of_its_kind(error: BaseException,
                                                        status: int) -> None:
    assert error.exit_code == status  # type: ignore[attr-defined]


def test_a_failed_run_keeps_its_traceback_out_of_the_message() -> None:
    failed = RunFailed("A worker crashed; rerun with --resume.", detail="Traceback ...")
    assert str(failed) == "A worker crashed; rerun with --resume."
    assert failed.detail == "Traceback ..." and RunFailed("x").detail == ""


def test_an_interruption_is_not_swallowed_by_except_exception() -> None:
    with pytest.raises(Interrupted):
        try:
            raise Interrupted(signal.SIGTERM)
        except Exception:  # what a careless handler in the work would write
            pytest.fail("Interrupted was caught as an Exception")
    assert not isinstance(Interrupted(), KeyboardInterrupt)


def test_an_interruption_without_a_message_is_left_for_the_cli_to_explain() -> None:
    bare, told = Interrupted(signal.SIGTERM), Interrupted(signal.SIGINT, "kept 3 episodes")
    assert not bare.explained and str(bare) == "stopped by signal 15"
    assert told.explained and str(told) == "kept 3 episodes" and told.signum == 2


def test_the_heading_names_sigterm_but_not_ctrl_c() -> None:
    assert Interrupted.heading(Interrupted(signal.SIGTERM)) == "Interrupted (SIGTERM)"
    assert Interrupted.heading(Interrupted(signal.SIGINT)) == "Interrupted"
    assert Interrupted.heading(KeyboardInterrupt()) == "Interrupted"


@pytest.mark.parametrize(("stopped", "signum"), [
    (Interrupted(signal.SIGTERM), 15), (Interrupted(signal.SIGINT), 2), (KeyboardInterrupt(), 2)])
def test_saying_keeps_the_signal_and_adds_the_message(stopped: BaseException,
                                                      signum: int) -> None:
    again = Interrupted.saying(stopped, "kept 3 episodes; rerun with --resume.")
    assert (again.signum, again.exit_code) == (signum, 128 + signum)
    assert again.explained and str(again) == "kept 3 episodes; rerun with --resume."


def test_check_choice_accepts_each_choice_and_refuses_others_naming_them() -> None:
    for value in ("warn", "fail"):
        check_choice("--on-divergence", value, ("warn", "fail"))
    with pytest.raises(UsageError) as refused:
        check_choice("--on-divergence", "shrug", ("warn", "fail"))
    assert str(refused.value) == "Unknown --on-divergence 'shrug'; use one of warn, fail."


def test_check_choice_names_the_flag_of_a_choice_the_api_makes_too() -> None:
    with pytest.raises(UsageError, match=r"^Unknown quality 'ultra' \(--quality\); use one of"):
        check_choice("quality", "ultra", ("low", "high"), "--quality")
    with pytest.raises(UsageError, match="'None'"):  # not a string at all
        check_choice("mode", None, ("resim",))
