"""Group commit: callers that gave up are not served, and the committer outlives them."""

import threading

from coordinator.fleet.group_commit import GroupCommit

from support.polling import wait_for


def test_a_cancelled_request_is_skipped_and_the_others_are_answered():
    release = threading.Event()
    served: list[list[str]] = []

    def serve(requests):
        served.append(list(requests))
        if requests == ["first"]:
            release.wait(30)  # the first group's transaction, held open
        return [f"{r}: done" for r in requests]

    commits = GroupCommit("test-commits", serve)
    try:
        first = commits.enqueue("first")
        wait_for(lambda: served, 10, "the first group to be taken", interval=0.01)
        gave_up, kept = commits.enqueue("gave up"), commits.enqueue("kept")
        assert commits.pending() == 3
        # What asyncio.wrap_future does when the awaiting handler's call is cancelled.
        assert gave_up.cancel()
        release.set()
        assert first.result(10) == "first: done" and kept.result(10) == "kept: done"
        assert served == [["first"], ["kept"]], "a request nobody waits for was served"
        assert commits.submit("after") == "after: done", "the committer survived the cancelled caller"
        assert not kept.cancel(), "an answered request cannot be cancelled"
        assert commits.pending() == 0
    finally:
        release.set()
        commits.close()


def test_groups_served_in_the_background_are_answered_and_a_failed_one_is_split():
    # serve may return a Future (the ingest process): the committer takes the next group at
    # once; a group that failed is served again one request at a time.
    from concurrent.futures import Future

    in_flight: list[tuple[list[str], Future]] = []

    def serve(requests):
        answers: Future = Future()
        in_flight.append((list(requests), answers))
        return answers

    commits = GroupCommit("test-background", serve)
    try:
        first = commits.enqueue("a")
        wait_for(lambda: len(in_flight) == 1, 10, "the first group to go out", interval=0.01)
        second, bad = commits.enqueue("b"), commits.enqueue("bad")
        wait_for(lambda: len(in_flight) == 2, 10, "the next group to go out before the first is answered",
                 interval=0.01)
        assert in_flight[1][0] == ["b", "bad"] and not first.done()
        in_flight[0][1].set_result(["a: done"])
        assert first.result(10) == "a: done"
        in_flight[1][1].set_exception(ValueError("bad request in the group"))
        wait_for(lambda: len(in_flight) == 4, 10, "the failed group's requests, served alone", interval=0.01)
        assert [requests for requests, _ in in_flight[2:]] == [["b"], ["bad"]]
        in_flight[2][1].set_result(["b: done"])
        in_flight[3][1].set_exception(ValueError("bad alone"))
        assert second.result(10) == "b: done"
        assert str(bad.exception(10)) == "bad alone"
        assert commits.pending() == 0
    finally:
        commits.close()
