"""Group commit: callers that gave up are not served, and the committer outlives them."""

import threading

from polling import wait_for

from coordinator.group_commit import GroupCommit


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
