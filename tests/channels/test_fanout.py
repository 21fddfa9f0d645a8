"""The fan-out's fast path: a frame goes to a connection's socket in the publishing loop itself
(:func:`baton.channels.server.start_now`), and only a send that has to wait for the socket
finishes in a task of its own. What must hold: a send that does not wait is done on return,
with nothing left to schedule; one that waits has run up to the wait, and its task finishes it
with what it waited for, or with the error or the cancellation it met."""

from __future__ import annotations

import asyncio

import pytest

from baton.channels.server import start_now


async def test_a_send_that_does_not_wait_is_done_on_return() -> None:
    written: list[str] = []

    async def send(text: str) -> None:
        written.append(text)

    assert start_now(send("a")) is None
    assert written == ["a"]


async def test_a_send_that_waits_is_finished_by_a_task_with_what_it_waited_for() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def send() -> None:
        steps.append("before")
        steps.append(await gate)
        await asyncio.sleep(0)  # a bare yield after the first wait is driven too
        steps.append("after")

    task = start_now(send())
    assert task is not None and not task.done()
    assert steps == ["before"]
    gate.set_result("written")
    await asyncio.wait_for(task, 5)
    assert steps == ["before", "written", "after"]


async def test_an_error_before_the_wait_is_raised_and_after_it_ends_the_task() -> None:
    async def broken() -> None:
        raise ConnectionResetError("gone")

    with pytest.raises(ConnectionResetError):
        start_now(broken())

    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def fails_later() -> None:
        await gate

    task = start_now(fails_later())
    assert task is not None
    gate.set_exception(BrokenPipeError("closed under the send"))
    with pytest.raises(BrokenPipeError):
        await asyncio.wait_for(task, 5)


async def test_cancelling_a_waiting_send_cancels_the_wait_inside_it() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cleaned: list[bool] = []

    async def send() -> None:
        try:
            await gate
        finally:
            cleaned.append(gate.cancelled())

    task = start_now(send())
    assert task is not None
    await asyncio.sleep(0)  # the task is waiting on the gate
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]
