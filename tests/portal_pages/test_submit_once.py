"""fairness.once against a real Redis: one submission acts, the rest learn what it did."""

from __future__ import annotations

import threading

import pytest

from fairness.portal import submit_once


def test_a_repeat_learns_the_first_outcome_and_one_in_progress_learns_nothing_yet(redis_url):
    token = submit_once.new_token()
    with submit_once.first_submission(token) as record:
        with pytest.raises(submit_once.Repeated) as during, submit_once.first_submission(token):
            pass
        record("gp-abc12345")

    with pytest.raises(submit_once.Repeated) as after, submit_once.first_submission(token):
        pass

    assert (during.value.outcome, after.value.outcome) == ("", "gp-abc12345")


def test_an_action_that_fails_gives_its_token_back(redis_url):
    token = submit_once.new_token()
    with pytest.raises(RuntimeError), submit_once.first_submission(token):
        raise RuntimeError("the database went away")

    with submit_once.first_submission(token) as record:  # the retry runs
        record("gp-def67890")


def test_of_many_simultaneous_submissions_exactly_one_acts(redis_url):
    token, acted, start = submit_once.new_token(), [], threading.Barrier(8)

    def submit() -> None:
        start.wait()
        try:
            with submit_once.first_submission(token) as record:
                acted.append(threading.get_ident())
                record("gp-once")
        except submit_once.Repeated:
            pass

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(acted) == 1
