"""The pure freshness policy (memory_core/freshness/policy.py) on a fake clock: debounce, retries with
backoff, merged and joined requests, the 15-minute full enumeration, interval and health checks,
and the cross-agent choice of what a runner thread serves next. No thread, no file, no sleep."""

from __future__ import annotations

from memory_core.freshness.policy import HEALTH, RECONCILE, DueQueue, Job, SyncPolicy


def policy(**kw) -> SyncPolicy:
    kw.setdefault("debounce_s", 1.5)
    p = SyncPolicy(**kw)
    p.last_enumeration = 0.0  # a full listing just happened (else targeted syncs become full)
    return p


def test_every_change_restarts_the_debounce_and_the_sync_takes_the_dirty_paths():
    p = policy()
    p.mark("/w/a.md", "watch")
    p.debounce(0.0)
    p.mark("/w/b.md", "watch")
    p.debounce(1.0)
    assert p.due_at() == 2.5
    assert p.next_action(2.4) is None
    job = p.next_action(2.5)
    assert isinstance(job, Job)
    assert (job.paths, job.known_changed, job.reasons) == ({"/w/a.md", "/w/b.md"}, {"/w/a.md", "/w/b.md"}, ["watch"])
    assert p.is_behind() and not p.is_dirty() and p.running is job
    assert p.succeeded(job) is True
    assert p.idle() and p.due_at() is None


def test_a_failed_sync_keeps_its_paths_dirty_and_retries_with_doubling_backoff():
    p = policy(retry_backoff_s=(2.0, 5.0))
    retries = []
    now = 0.0
    p.mark("/w/a.md", "watch")
    p.debounce(now, immediate=True)
    for _ in range(4):
        job = p.next_action(now)
        p.failed(job, now)
        assert p.pending() == {"/w/a.md"}
        retries.append(p.retry_at - now)
        now = p.retry_at
    assert retries == [2.0, 4.0, 5.0, 5.0]
    job = p.next_action(now)
    assert job.reasons[0] == "retry" and job.paths == {"/w/a.md"}
    p.succeeded(job)
    p.settled(now, failed={}, changed_during=False)
    assert p.retry_delay == 2.0  # reset once nothing is left to retry


def test_files_that_could_not_be_published_are_retried_until_they_are():
    p = policy(retry_backoff_s=(2.0, 300.0))
    p.problems.clear()
    job = p.request({"/w/a.md"}, "manual", force=False, include_dirty=True)
    assert p.next_action(0.0) is job
    p.succeeded(job)
    p.settled(0.0, failed={"/w/a.md": "disk full"}, changed_during=False)
    assert p.problems == {"/w/a.md": "disk full"} and p.due_at() == 2.0
    retry = p.next_action(2.0)
    assert retry.paths == {"/w/a.md"} and retry.reasons == ["retry"]


def test_a_file_changed_during_its_own_sync_is_synced_again_after_the_debounce():
    p = policy()
    job = p.request({"/w/a.md"}, "manual", force=False, include_dirty=True)
    p.next_action(0.0)
    p.succeeded(job)
    p.dirty_paths.add("/w/a.md")
    p.settled(3.0, failed={}, changed_during=True)
    assert p.due_at() == 4.5 and "changed-during-sync" in p.dirty_reasons


def test_requests_merge_into_the_queued_sync_and_join_a_running_one_that_covers_them():
    p = policy()
    first = p.request({"/w/a.md"}, "search", force=False, include_dirty=False)
    assert p.request({"/w/b.md"}, "manual", force=False, include_dirty=False) is first
    assert first.paths == {"/w/a.md", "/w/b.md"} and first.reasons == ["search", "manual"]
    assert p.next_action(0.0) is first
    assert p.request({"/w/a.md"}, "again", force=False, include_dirty=False) is first  # joins the running one
    forced = p.request({"/w/a.md"}, "force", force=True, include_dirty=False)
    assert forced is not first and p.queued is forced  # a forced request is not covered by an unforced sync
    full = p.request(None, "full", force=False, include_dirty=False)
    assert full is forced and full.paths is None


def test_targeted_syncs_become_full_when_no_listing_ran_for_15_minutes():
    p = policy(full_reconcile_s=900.0)
    p.mark("/w/a.md", "watch")
    p.debounce(0.0, immediate=True)
    job = p.next_action(100.0)
    assert job.paths == {"/w/a.md"}
    p.succeeded(job)
    p.mark("/w/a.md", "watch")
    p.debounce(900.0, immediate=True)
    job = p.next_action(900.0)
    assert job.paths is None
    p.succeeded(job)
    assert p.last_enumeration == 900.0


def test_interval_health_and_background_reconcile_come_due_in_order():
    p = policy(interval_s=60.0, health_s=30.0)
    p.start(0.0)
    assert p.due_at() == 30.0
    assert p.next_action(30.0) == HEALTH and p.due_at() == 60.0
    job = p.next_action(60.0)
    assert job.paths is None and job.reasons == ["interval"]
    p.succeeded(job)
    p.reconcile_due = True
    assert p.due_at() == 0.0 and p.next_action(61.0) == RECONCILE
    p.closed = True
    assert p.due_at() is None and p.next_action(1000.0) is None


def test_an_invalidation_voids_the_running_sync_and_asks_for_a_full_pass():
    p = policy()
    job = p.request({"/w/a.md"}, "manual", force=False, include_dirty=True)
    p.next_action(0.0)
    p.invalidate()
    assert p.succeeded(job) is False  # its stats are not recorded as verified
    assert p.dirty_full and "index-replaced" in p.dirty_reasons


def test_the_runner_serves_the_agent_due_earliest_and_never_one_agent_twice():
    q = DueQueue()
    q.push("b", 5.0)
    q.push("a", 2.0)
    q.push("c", 9.0)
    assert q.take(1.0) == (None, 2.0)
    assert q.take(6.0) == ("a", None)
    assert q.take(6.0) == ("b", None)
    q.push("a", 0.0)  # due again while a thread still serves it: not handed to a second thread
    assert q.take(100.0) == ("c", None)
    assert q.take(100.0) == (None, None)
    q.release("a", None)  # its step found nothing more, but the push made meanwhile counts
    assert q.take(100.0) == ("a", None)


def test_dropped_agents_leave_the_queue_not_only_its_index():
    # a closed agent must not stay referenced (with everything it holds) until its due time
    q = DueQueue()
    for i in range(500):
        q.push(f"agent{i}", 30.0 + i)
    assert q.head() == 30.0
    q.drop([f"agent{i}" for i in range(0, 500, 2)] + [f"agent{i}" for i in range(1, 400, 2)])
    assert len(q) == 50 and len(q._heap) <= 2 * 50 + 64
    assert all(key in ("agent" + str(i) for i in range(401, 500, 2)) for _due, _seq, key in q._heap)
    taken = [q.take(1e9)[0] for _ in range(50)]
    assert taken == [f"agent{i}" for i in range(401, 500, 2)] and q.take(1e9) == (None, None)


def test_a_due_time_moved_later_comes_up_early_and_an_earlier_one_wins():
    q = DueQueue()
    q.push("a", 10.0)
    q.push("a", 20.0)  # later: the entry at 10 stays and is re-checked then
    assert len(q) == 1 and q.take(10.0) == ("a", None)
    q.release("a", 20.0)
    assert q.take(19.0) == (None, 20.0)
    q.push("a", 3.0)  # earlier: wins at once
    assert q.take(19.0) == ("a", None)
    q.release("a", None)
    q.drop(["a"])
    assert q.take(1e9) == (None, None)
