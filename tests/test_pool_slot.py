"""One worker's bookkeeping as the owner sees it (workers.slot), over a plain pipe: no process."""

from __future__ import annotations

import os
import pickle

import pytest

from workers.frames import FrameReader, write_frame
from workers.slot import Slot, Task, decode_reply, task_frame


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def make_slot(request_fd: int, channels: int = 2) -> Slot:
    slot = Slot(1, state="idle", request_fd=request_fd)
    slot.owners = [None] * channels
    slot.free = list(range(channels - 1, -1, -1))
    return slot


def make_task(tid: int, name: str = "ping") -> Task:
    data = task_frame(tid, name, tid * 10)
    return Task(tid, name, data, len(data), None, None, None)


def test_tasks_go_out_on_free_channels_in_order(pipe):
    r, w = pipe
    slot = make_slot(w)
    first, second = make_task(1), make_task(2)
    assert slot.send(first) and slot.send(second)
    assert (slot.state, first.channel, second.channel, slot.free) == ("busy", 0, 1, [])
    assert slot.task is first and slot.queued == [second]
    reader = FrameReader(r)
    frames = [reader.next(), reader.next()]
    assert [(ch, pickle.loads(data)) for ch, data in frames] == [(0, ("task", 1, "ping", 10)),
                                                                  (1, ("task", 2, "ping", 20))]


def test_a_reply_frees_its_channel_and_a_stale_one_is_ignored(pipe):
    slot = make_slot(pipe[1])
    first, second = make_task(1), make_task(2)
    slot.send(first)
    slot.send(second)
    assert slot.take_reply(1, 99) is None  # a reply id this channel's task does not have
    assert slot.take_reply(0, 1) is first
    assert (slot.free, list(slot.inflight), slot.tasks_run) == ([0], [second], 1)


def test_tasks_sent_ahead_are_taken_back_last_first(pipe):
    slot = make_slot(pipe[1], channels=3)
    tasks = [make_task(i) for i in (1, 2, 3)]
    for task in tasks:
        slot.send(task)
    assert [t.id for t in slot.unsend_queued()] == [3, 2]
    assert list(slot.inflight) == [tasks[0]] and slot.owners == [tasks[0], None, None]
    assert (tasks[1].slot, tasks[1].channel) == (None, None)


def test_a_send_to_a_closed_pipe_gives_the_channel_back(pipe):
    r, w = pipe
    os.close(r)
    slot = make_slot(w)
    task = make_task(1)
    assert slot.send(task) is False
    assert (slot.state, sorted(slot.free), task.slot) == ("retiring", [0, 1], None)


def test_replies_waiting_before_an_exit_are_read_in_order():
    channels = [os.pipe() for _ in range(2)]
    try:
        slot = make_slot(-1)
        slot.channel_fds = [r for r, _ in channels]
        first, second = make_task(1), make_task(2)
        for ch, task in enumerate((first, second)):
            slot.owners[ch] = task
            task.channel = ch
            slot.inflight.append(task)
        write_frame(channels[0][1], pickle.dumps((1, True, "one")))
        assert [(ch, decode_reply(data)) for ch, data in slot.sent_replies()] == [(0, (1, True, "one"))]
    finally:
        for pair in channels:
            for fd in pair:
                os.close(fd)


def test_an_unreadable_reply_comes_back_as_its_exception():
    assert isinstance(decode_reply(b"not a pickle"), pickle.UnpicklingError)
