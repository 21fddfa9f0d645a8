"""Workload types: what runs in a control group's members.

A workload type is a :class:`Workload` subclass registered under a type name, from three places
(later ones win): the built-in ``counter``, the ``baton.workloads`` entry point group of
installed packages (where baton registers its own ``cascade-worker``: placement imports nothing
of the layers that run on it), and the node config's ``[workloads]`` table
(``name = "package.module:Class"``).

One instance runs per group member on its node. The node's runner calls the hooks as the
group record says: ``start_leader(term)`` on the nominated leader, ``start_follower(leader,
term)`` on the others, and the matching ``stop_*`` before a role changes. ``term`` is the
group's epoch: every side effect of a leader must carry it, and whatever receives it must refuse
a term lower than the highest it has seen. The controller asks members for
``commit_index()`` (how much of the group's data this member has) and ``stream_live()``
(whether this follower currently receives from its leader) to decide leader transfers.

A type checks an object's ``spec`` with :meth:`Workload.validate_spec` (by default against its
pydantic :attr:`Workload.spec_model`): when the object is created, so that a spec the type
cannot use is refused before anything is written, and again on a node before a member starts,
so that a spec that got past creation becomes the member's reported error.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from baton.errors import BatonError, ConfigError, SpecError
from baton.errors import NotLeader as NotLeader  # noqa: PLC0414 (re-exported: runner imports it)
from baton.logs import describe
from baton.placement.model import NAME, ObjectSpec
from baton.validation import first_problem

log = logging.getLogger("baton.workload")

ENTRY_POINTS = "baton.workloads"

#: Ask the leader of a group (node id, group key, request) -> its answer.
Fetch = Callable[[str, str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class WorkloadContext:
    """What a workload instance knows about where it runs."""

    obj: ObjectSpec
    partition: int
    group: str
    node_id: str
    #: A directory of its own, kept across restarts of the node.
    data_dir: Path
    #: Ask the group's leader (through its node's API, with the cluster token).
    fetch: Fetch
    #: The node's SparkSession, built on first use from its ``[spark]`` config (blocking: call
    #: it from a thread). None where the node offers no Spark.
    spark: Callable[[], Any] | None = None


class Workload(abc.ABC):
    """One member of a control group on this node. Hooks run on the node's event loop and must
    not block it; a hook that raises leaves the member reported with the error (the controller
    retries)."""

    #: The type name objects use (``baton object create TYPE ...``).
    type_name: ClassVar[str]
    #: The pydantic model of this type's ``spec``, used by :meth:`validate_spec`; None accepts
    #: any JSON object. Field descriptions are shown when a value is refused, so say there
    #: what a good value is.
    spec_model: ClassVar[type[BaseModel] | None] = None

    def __init__(self, ctx: WorkloadContext) -> None:
        self.ctx = ctx

    @classmethod
    def validate_spec(cls, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Return ``spec`` as this type will use it, or raise :class:`~baton.errors.SpecError`
        with one line naming the setting, what is wrong with it and what to use.

        Called when an object is created (``baton object create``,
        :func:`~baton.placement.records.create_object`: a refused spec writes nothing) and by
        a node before it creates a member (an object stored without the check: the member
        reports the error, the group shows it, and the node's other members carry on). The
        default checks against :attr:`spec_model` (keeping only the settings given, so the
        stored spec stays what the user wrote) and accepts any spec when there is none.
        Override it for checks a model cannot express; it must not do I/O (the CLI calls it,
        away from the nodes).
        """
        model = cls.spec_model
        if model is None:
            return dict(spec)
        try:
            checked = model.model_validate(dict(spec))
        except ValidationError as exc:
            raise SpecError(_spec_problem(cls.type_name, model, exc)) from None
        return checked.model_dump(mode="json", exclude_unset=True)

    @abc.abstractmethod
    async def start_leader(self, term: int) -> None:
        """Become the group's leader at ``term`` (higher than any earlier term of the group)."""

    @abc.abstractmethod
    async def stop_leader(self) -> None:
        """Stop every leader action at once (the term is over)."""

    @abc.abstractmethod
    async def start_follower(self, leader: str, term: int) -> None:
        """Follow ``leader`` (a node id) from ``term`` on."""

    @abc.abstractmethod
    async def stop_follower(self) -> None:
        """Stop following."""

    @abc.abstractmethod
    def commit_index(self) -> int:
        """How far this member's copy of the group's data goes (higher is more)."""

    def stream_live(self) -> bool:
        """Whether this follower has a live stream from its leader right now."""
        return False

    async def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer a follower's ``fetch`` (called on the leader's node)."""
        raise BatonError(f"workload type {self.type_name!r} serves no fetches")

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release resources (the member is leaving this node or the node stops)."""


def _spec_problem(type_name: str, model: type[BaseModel], exc: ValidationError) -> str:
    """One line for the first problem pydantic found in a spec."""
    p = first_problem(exc)
    field = p.where
    where = f"{type_name} spec.{field}" if field else f"{type_name} spec"
    if p.kind == "extra_forbidden":
        known = ", ".join(sorted(model.model_fields)) or "none"
        return f"{where}: not a setting of {type_name} (its settings: {known})"
    info = model.model_fields.get(str(p.loc[0])) if p.loc else None
    hint = f" ({field}: {info.description})" if info is not None and info.description else ""
    if p.kind == "string_pattern_mismatch":  # the pattern itself would say little
        return f"{where}: {p.value!r} is not valid{hint}"
    return f"{where}: {p.message}{hint}"


class CounterSpec(BaseModel):
    """The ``counter`` type's spec. Strict: a string or a boolean is not a number."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # Bounded both ways: at 0 or below the leader's loop never yields (it spins and rewrites
    # its file as fast as it can), and beyond an hour a follower's stream is never live.
    interval: float = Field(
        default=0.1,
        ge=0.001,
        le=3600,
        allow_inf_nan=False,
        description="seconds between two advances of the leader, a number from 0.001 to 3600",
    )


class Counter(Workload):
    """The built-in ``counter``: the leader advances a counter every ``interval`` seconds
    (spec, default 0.1) and followers copy it from the leader. Its value is the commit index.

    Each member keeps ``{"term", "index"}`` in a file of its data dir, so a restarted member
    reports what it had. A follower copies only from a leader whose term is the one it follows;
    the leader answers only while it leads that term, so a deposed leader feeds no one.
    """

    type_name = "counter"
    spec_model = CounterSpec

    def __init__(self, ctx: WorkloadContext) -> None:
        super().__init__(ctx)
        self.interval = CounterSpec(**self.validate_spec(ctx.obj.spec)).interval
        self._file = ctx.data_dir / "counter.json"
        self.index, self.term = self._load()
        self.leading_term: int | None = None
        self.following: tuple[str, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_copy = 0.0

    def _load(self) -> tuple[int, int]:
        try:
            data = json.loads(self._file.read_text())
            return int(data["index"]), int(data["term"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0, 0

    def _save(self) -> None:
        tmp = self._file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"index": self.index, "term": self.term}))
        tmp.replace(self._file)  # atomic: a crash leaves the old or the new value

    async def _stop_task(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def start_leader(self, term: int) -> None:
        await self._stop_task()
        self.following = None
        self.leading_term = term
        self.term = term
        self._task = asyncio.create_task(self._advance(term), name=f"counter-lead-{self.ctx.group}")

    async def _advance(self, term: int) -> None:
        while self.leading_term == term:
            self.index += 1
            self._save()
            await asyncio.sleep(self.interval)

    async def stop_leader(self) -> None:
        self.leading_term = None
        await self._stop_task()

    async def start_follower(self, leader: str, term: int) -> None:
        await self._stop_task()
        self.leading_term = None
        self.following = (leader, term)
        self._last_copy = 0.0
        self._task = asyncio.create_task(
            self._copy(leader, term), name=f"counter-follow-{self.ctx.group}"
        )

    async def _copy(self, leader: str, term: int) -> None:
        while True:
            try:
                answer = await self.ctx.fetch(leader, self.ctx.group, {"term": term})
                if int(answer.get("term", -1)) == term:
                    # A follower never goes back: it keeps the highest index it has seen.
                    self.index = max(self.index, int(answer["index"]))
                    self.term = term
                    self._save()
                    self._last_copy = time.monotonic()
            except (BatonError, OSError, ValueError, KeyError) as exc:
                log.debug(
                    "counter copy failed", extra={"group": self.ctx.group, "error": describe(exc)}
                )
            await asyncio.sleep(self.interval)

    async def stop_follower(self) -> None:
        self.following = None
        await self._stop_task()

    def commit_index(self) -> int:
        return self.index

    def stream_live(self) -> bool:
        # Live: a copy from the leader succeeded within a few intervals (at least a second, so
        # a slow request on a loaded host does not look like a dead leader).
        window = max(2.5 * self.interval, 1.0)
        return self.following is not None and time.monotonic() - self._last_copy < window

    async def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        term = request.get("term")
        if self.leading_term is None or term != self.leading_term:
            raise NotLeader(f"not the leader of {self.ctx.group} at term {term}")
        return {"term": self.leading_term, "index": self.index}

    async def close(self) -> None:
        self.leading_term = None
        self.following = None
        await self._stop_task()


def _builtin() -> dict[str, type[Workload]]:
    # Only the types of this layer. Types of higher layers (baton's own ``cascade-worker``
    # among them) register through the ``baton.workloads`` entry points, so placement never
    # imports what runs on it.
    return {Counter.type_name: Counter}


def find_type(name: str) -> type[Workload] | None:
    """The workload type ``name`` as this process knows it (built in, or from an installed
    package's entry point), or None: a type that only nodes configure (``[workloads]``) is
    not known here. Loads no other entry point, so a broken plug-in does not get in the way
    of the others."""
    found = _builtin().get(name)
    for ep in metadata.entry_points(group=ENTRY_POINTS, name=name):
        found = _load_class(ep.name, ep.value)
    return found


def check_spec(obj: ObjectSpec) -> ObjectSpec:
    """``obj`` with its spec as its type validates it (unchanged when this process does not
    know the type: the node that runs it checks it before a member starts). Raises
    :class:`~baton.errors.SpecError` naming the object."""
    cls = find_type(obj.type)
    if cls is None:
        return obj
    try:
        spec = cls.validate_spec(obj.spec)
    except SpecError as exc:
        raise SpecError(f"object {obj.name!r}: {exc}") from None
    return obj.model_copy(update={"spec": spec})


def _load_class(name: str, target: str) -> type[Workload]:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"workloads.{name} = {target!r}: expected 'package.module:Class'")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"workloads.{name} = {target!r}: cannot import it ({exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise ConfigError(f"workloads.{name} = {target!r}: not a baton Workload subclass")
    return cls


def load_types(configured: Mapping[str, str] | None = None) -> dict[str, type[Workload]]:
    """Every workload type this node can run, by type name."""
    types = _builtin()
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        types[ep.name] = _load_class(ep.name, ep.value)
    for name, target in (configured or {}).items():
        if not NAME.match(name):
            raise ConfigError(f"workloads.{name}: a type name is 1-128 letters, digits, '_.-'")
        types[name] = _load_class(name, target)
    return types
