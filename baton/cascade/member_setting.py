"""A set's setting kept by its members: automatic failover's switch
(:mod:`baton.cascade.auto_switch`) and synchronous mode's K (:mod:`baton.cascade.sync_mode`).

**Where a setting lives: in the members' node databases**, as the set's other settings do (its
node list, the dead tags, pause). Why there and not in the coordination store: every
``baton cascade`` verb reaches a set through ``--via`` alone, with no store; a setting has to
outlive the root it is about (a failover must find it at the branches while the root's database
is gone), and the branches carry it; and a set moved to another cluster, or run by
``baton cascade run`` without placement, keeps it.

Each reachable member not tagged dead holds a local key ``KEY`` = ``{FIELD: value, "at": wall
time}``. The newest copy read wins, so a member that was unreachable when the setting changed
(and still holds the old value) does not change it back; a member that never had one says
nothing, and a set where none has one has the setting's default.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.set_ops import CascadeSet
from baton.errors import CascadeError, CascadeInputError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Copy(Generic[T]):
    """One member's copy of a setting."""

    value: T
    #: When it was set (wall time of the host that set it).
    at: float


class MemberSetting(Generic[T]):
    """One setting: its local key, the JSON field of its value, how to read a value (None: not a
    value baton wrote) and the set's value when no member has a copy."""

    def __init__(self, key: str, field: str, parse: Callable[[Any], T | None], default: T) -> None:
        self.key = key
        self.field = field
        self._parse = parse
        self.default = default

    def read(self, db: NodeDB) -> Copy[T] | None:
        """This member's copy (None: never set here, or not a value baton wrote)."""
        raw = db.get_local(self.key)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            value = self._parse(data[self.field])
            return None if value is None else Copy(value, float(data["at"]))
        except (ValueError, KeyError, TypeError):
            return None

    def newest_at(self, locations: Iterable[str]) -> T:
        """The setting for the members at ``locations`` (the caller passes those not tagged
        dead): the newest copy among those reachable, the default when none has one."""
        newest: Copy[T] | None = None
        for location in locations:
            try:
                with open_node_db(location, readonly=True) as db:
                    found = self.read(db)
            except (CascadeError, OSError):
                continue  # unreachable: the others say it
            if found is not None and (newest is None or found.at > newest.at):
                newest = found
        return self.default if newest is None else newest.value

    def of(self, c: CascadeSet) -> T:
        """The setting of the set at ``c``."""
        return self.newest_at(loc for _, (loc, dead) in sorted(c.nodes.items()) if not dead)

    def write(self, c: CascadeSet, value: T) -> list[str]:
        """Give every reachable member not tagged dead a copy of ``value``, stamped now; the
        members not reached (they keep their old copy, which the newer one outweighs)."""
        stamped = json.dumps({self.field: value, "at": time.time()})

        def put(db: NodeDB) -> None:
            with db.transaction() as cur:
                db.set_local(cur, self.key, stamped)

        return c._for_each_live(put)


def check_set_name(c: CascadeSet, set_name: str) -> None:
    """Refuse (:class:`CascadeInputError`) a set name that is not the set at ``c``'s member."""
    if c.set_name != set_name:
        raise CascadeInputError(
            f"no set {set_name!r} at that member: it is in set {c.set_name} (check the set's "
            "name and --via)"
        )


__all__ = ["Copy", "MemberSetting", "check_set_name"]
