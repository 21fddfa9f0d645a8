"""The low-latency task keeps the cyclic collector out of its steps
(:func:`baton.collector.collector_paused`): a catch-up's batches set off full collections of
the whole Python worker's heap, which freed nothing. Between steps the collector runs."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from baton.cascade import node_ops
from baton.cascade.batches import Outcome
from baton.cascade.db import NodeDB
from baton.cascade.model import Role
from baton.collector import collector_paused
from baton.service import task
from baton.testing.workload import create_accounts


def test_the_collector_is_off_inside_and_as_it_was_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a step that fails")
    assert gc.isenabled()
    gc.disable()  # someone else's choice is kept
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_every_step_of_a_task_runs_with_the_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, leaf = (f"sqlite://{tmp_path}/{n}.db" for n in ("r", "l"))
    create_accounts(root)
    node_ops.create_root("r", root, "S")
    node_ops.create_subscriber(Role.LEAF, "l", leaf, "r", root)
    seen: list[bool] = []

    def step(db: NodeDB, src: NodeDB, spec: task.Follow) -> Outcome:
        seen.append(gc.isenabled())
        return Outcome.IDLE if len(seen) < 3 else Outcome.FENCED

    monkeypatch.setattr(task, "step", step)
    spec = task.Follow(subscriber=leaf, provider_name="r", provider=root, epoch=1, poll=0.001)
    assert task.follow(spec) is Outcome.FENCED
    assert seen == [False, False, False]
    assert gc.isenabled()
