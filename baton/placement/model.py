"""The shapes of what placement keeps in the store: objects and control groups, validated.

Pure data and validation, no I/O: :mod:`baton.placement.records` reads and writes them (under
the keys of :mod:`baton.keys`), and a workload sees its object as an :class:`ObjectSpec`.

A group's *term* is its leadership epoch: it grows at every leader change and is never lower
than the epoch of the controller that made the change. Terms come from the store's epoch
counter of the group's key (``Store.next_epochs``), which outlives the record, so a group
deleted and created again never reuses a term. Workloads carry it on every side effect.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from baton.errors import ConfigError
from baton.validation import first_problem

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: The label every node gets for each workload type it can run; groups select on it, so no
#: member is placed on a node that cannot run it.
TYPE_LABEL = "baton.type/"

#: ``error``: a member reports that its workload cannot run (``detail`` says where and why);
#: placement goes on as usual and the member is tried again at every pass.
GroupState = Literal["ok", "placing", "transferring", "failure", "error"]


def _check_name(kind: str, value: str) -> str:
    if not NAME.match(value):
        raise ValueError(
            f"{kind} {value!r}: use 1-128 letters, digits, '_', '.' or '-', starting with a "
            "letter or digit"
        )
    return value


class ObjectSpec(BaseModel):
    """A distributed object: ``partitions`` control groups of ``replicas`` members each."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    partitions: int = Field(default=1, ge=1, le=10_000)
    replicas: int = Field(default=1, ge=1, le=9)
    spec: dict[str, Any] = Field(default_factory=dict)
    #: Node labels a member's node must have (``{"zone": "a"}``).
    selector: dict[str, str] = Field(default_factory=dict)
    created_at: float = 0.0

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name("object name", v)

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        return _check_name("object type", v)

    def group_keys(self) -> list[str]:
        return [group_key(self.name, p) for p in range(self.partitions)]


class Transfer(BaseModel):
    """Why and to whom the last leader change went, with the commit indices it was based on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    previous: str | None
    chosen: str
    reason: str
    commit_indices: dict[str, int] = Field(default_factory=dict)
    at: float = 0.0


class GroupRecord(BaseModel):
    """The control group of one partition: members (distinct nodes) and a nominated leader."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    object: str
    type: str
    partition: int
    members: tuple[str, ...] = ()
    leader: str | None = None
    term: int = 0
    state: GroupState = "placing"
    #: Human-readable reason while the state is not ``ok`` (shown in status).
    detail: str = ""
    controller_epoch: int = 0
    transfer: Transfer | None = None

    @property
    def key(self) -> str:
        return group_key(self.object, self.partition)


def group_key(name: str, partition: int) -> str:
    return f"{name}/{partition}"


def parse_object(raw: bytes) -> ObjectSpec:
    return ObjectSpec.model_validate_json(raw)


def parse_group(raw: bytes) -> GroupRecord:
    return GroupRecord.model_validate_json(raw)


def dump(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()


def make_object(
    type_: str,
    name: str,
    partitions: int,
    replicas: int,
    *,
    spec: str | dict[str, Any] | None = None,
    selector: dict[str, str] | None = None,
    created_at: float = 0.0,
) -> ObjectSpec:
    """Validate user input into an :class:`ObjectSpec`; one-line :class:`ConfigError` if bad."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--spec is not valid JSON: {exc.msg} at column {exc.colno}"
            ) from None
    if spec is not None and not isinstance(spec, dict):
        raise ConfigError("--spec must be a JSON object, like '{\"interval\": 0.1}'")
    try:
        return ObjectSpec(
            name=name,
            type=type_,
            partitions=partitions,
            replicas=replicas,
            spec=spec or {},
            selector=selector or {},
            created_at=created_at,
        )
    except ValidationError as exc:
        p = first_problem(exc)
        raise ConfigError(
            f"{p.where}: {p.message}" if p.where not in p.message else p.message
        ) from None
