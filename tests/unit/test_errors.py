"""One exception tree: every exception class of baton is defined in ``baton/errors.py`` under
:class:`BatonError`, the tree drawn at its top is the real one, kinds of failure are classes
(``except ConfigError`` never catches an unreachable database), backends translate their
drivers' errors by code, and no source file decides anything by reading an error's message."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import baton
from baton import errors
from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.cascade.db.sqlite import SQLiteNodeDB
from baton.errors import (
    BatonError,
    CascadeError,
    CascadeInputError,
    ConfigError,
    Deposed,
    FencedOut,
    LeaseError,
    NodeDatabaseError,
    NodeUnreachable,
    NotANode,
    NotFinished,
    Refused,
    StaleEpoch,
    StoreTimeout,
    StoreUnavailable,
)
from baton.store.sqlite import translate

SOURCE = Path(baton.__file__).parent
ERRORS = SOURCE / "errors.py"


def _modules() -> Iterator[str]:
    yield "baton"
    for info in pkgutil.walk_packages(baton.__path__, "baton."):
        yield info.name


def _exception_classes() -> list[tuple[str, type[BaseException]]]:
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found.append((name, obj))
    return found


# -- one tree, in one module ---------------------------------------------------------------------


def test_every_exception_class_is_a_baton_error_defined_in_errors() -> None:
    found = _exception_classes()
    assert {m for m, _ in found} == {"baton.errors"}, [
        f"{m}.{c.__name__}" for m, c in found if m != "baton.errors"
    ]
    assert [c.__name__ for _, c in found if not issubclass(c, BatonError)] == []
    assert len(found) >= 20


def _exception_base(base: ast.expr) -> bool:
    """Whether a base class written in a class statement is an exception class (a builtin one,
    one of baton.errors, or a name that says so)."""
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    known = getattr(builtins, name, None) or getattr(errors, name, None)
    if inspect.isclass(known):
        return issubclass(known, BaseException)
    return name.endswith(("Error", "Exception"))


def test_no_exception_class_statement_outside_errors_not_even_nested() -> None:
    # The import walk above sees module-level classes; this sees a class statement anywhere (a
    # private one in a function, as commands.py once had for its switchover's timeout).
    offenders = []
    for path in sorted(SOURCE.rglob("*.py")):
        if path == ERRORS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(_exception_base(b) for b in node.bases):
                offenders.append(f"{path.relative_to(SOURCE.parent)}:{node.lineno} {node.name}")
    assert offenders == []


_ENTRY = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def test_the_tree_drawn_in_errors_is_the_real_one() -> None:
    doc = errors.__doc__ or ""
    drawn = doc[doc.index("    BatonError\n") :].split("\n\n")[0].splitlines()
    path: list[type[BaseException]] = [BatonError]
    names = {"BatonError"}
    for line in drawn[1:]:
        m = _ENTRY.match(line.removeprefix("    "))
        if m is None:
            continue  # the continuation of a description
        depth = len(m["indent"]) // 4 + 1
        cls = getattr(errors, m["name"])
        assert issubclass(cls, path[depth - 1]), f"{m['name']} drawn under {path[depth - 1]}"
        path[depth:] = [cls]
        names.add(m["name"])
    defined = {c.__name__ for m, c in _exception_classes() if m == "baton.errors"}
    assert defined == names, "every class of errors.py is drawn in its tree, and only those"


def test_kinds() -> None:
    assert issubclass(FencedOut, StaleEpoch) and issubclass(FencedOut, CascadeError)
    assert issubclass(Deposed, StaleEpoch) and issubclass(StaleEpoch, LeaseError)
    unreachable = NodeUnreachable("sqlite:///n.db: cannot write: database is locked")
    assert not isinstance(unreachable, ConfigError)
    assert isinstance(unreachable, NodeDatabaseError | CascadeError)
    for cls in (NodeDatabaseError, Refused, NotFinished, FencedOut, CascadeError):
        assert not issubclass(cls, ConfigError), cls
    assert issubclass(CascadeInputError, ConfigError) and issubclass(CascadeInputError, ValueError)
    assert issubclass(NotANode, CascadeInputError)


def test_old_import_paths_name_the_same_classes() -> None:
    from baton.local.waiting import WaitTimeout
    from baton.node.peers import PeerError
    from baton.placement.workload import NotLeader

    assert commands.Refused is Refused and commands.NotFinished is NotFinished
    assert NotLeader is errors.NotLeader and PeerError is errors.PeerError
    assert issubclass(WaitTimeout, AssertionError) and WaitTimeout is errors.WaitTimeout


# -- kinds are classes, never text ---------------------------------------------------------------


def test_classify_decides_by_class_alone() -> None:
    def kind(exc: BaseException) -> str | None:
        found = commands.classify(exc)
        return None if found is None else found[0]

    assert kind(CascadeInputError("unknown node 'zz'")) == "input"
    assert kind(NotANode("x is not a cascade node")) == "input"
    assert kind(ConfigError("bad")) == "input"
    assert kind(Refused("a cycle")) == "refused"
    assert kind(FencedOut("epoch 3 < 4")) == "refused"
    assert kind(CascadeError("a batch out of order")) == "refused"
    assert kind(NotFinished("run it again")) == "unfinished"
    assert kind(NodeUnreachable("cannot connect")) == "unreachable"
    assert kind(NodeDatabaseError("constraint failed")) == "unreachable"
    assert kind(FileNotFoundError(2, "No such file or directory", "/x")) == "unreachable"
    # An untranslated driver error is a bug of a backend, not a guess from its module's name.
    assert kind(sqlite3.OperationalError("database is locked")) is None
    # Bad input is bad input whatever it was raised while handling.
    try:
        try:
            raise ConnectionRefusedError("refused")
        except OSError:
            raise CascadeInputError("bad location") from None
    except CascadeInputError as exc:
        assert kind(exc) == "input"
    assert commands.classify(CascadeInputError("x\n  y postgresql://u:pw@h/db")) == (
        "input",
        "x y postgresql://u:***@h/db",
    )


def _sqlite_error(code: int, message: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorcode = code
    return exc


def test_the_sqlite_store_translates_by_result_code_not_message() -> None:
    url = "sqlite:///s.db"
    busy_extended = sqlite3.SQLITE_BUSY | (1 << 8)  # SQLITE_BUSY_RECOVERY
    assert isinstance(translate(url, _sqlite_error(busy_extended, "whatever")), StoreTimeout)
    assert isinstance(translate(url, _sqlite_error(sqlite3.SQLITE_LOCKED, "x")), StoreTimeout)
    # The words alone decide nothing.
    said = _sqlite_error(sqlite3.SQLITE_IOERR, "disk I/O error: device busy, file locked")
    assert type(translate(url, said)) is StoreUnavailable
    assert type(translate(url, sqlite3.OperationalError("database is locked"))) is StoreUnavailable


def test_a_frozen_wal_lock_holder_makes_a_node_unreachable_not_bad() -> None:
    # "locking protocol": in WAL mode another process was frozen holding a shared-memory lock
    # (found by the paused-subscriber test in CI). Retried like a busy node.
    from baton.cascade.db.sqlite import _failure
    from baton.errors import NodeUnreachable

    said = _sqlite_error(sqlite3.SQLITE_PROTOCOL, "locking protocol")
    assert isinstance(_failure("sqlite:///n.db: read", said), NodeUnreachable)


def test_sqlite_node_database_translates_at_its_boundary(tmp_path: Path) -> None:
    plain = tmp_path / "plain.db"
    with sqlite3.connect(plain) as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
    with open_node_db(f"sqlite://{plain}") as db:
        assert not db.is_installed()
        with pytest.raises(NotANode, match="not a cascade node"):
            db.state()
        with pytest.raises(CascadeInputError, match="no table 'nope'"):
            db.columns("nope")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(NotANode, match="not a database"):
        open_node_db(f"sqlite://{garbage}")

    node = tmp_path / "n.db"
    location = f"sqlite://{node}"
    from baton.cascade import node_ops

    node_ops.create_root("n1", location, "S")
    # A writer holding the file exclusively (WAL readers are otherwise never blocked).
    holder = sqlite3.connect(node, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("DELETE FROM baton_subscriber")
    reader = SQLiteNodeDB(location, readonly=True)  # runs no statement when it opens
    try:
        reader.conn.execute("PRAGMA busy_timeout = 0")
        with pytest.raises(NodeUnreachable, match="locked") as info:
            reader.state()
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        assert not isinstance(info.value, ConfigError)
    finally:
        reader.close()
        holder.execute("ROLLBACK")
        holder.close()
    # A statement of the caller's transaction that the driver refuses.
    with (
        open_node_db(location) as db,
        pytest.raises(NodeDatabaseError) as failed,
        db.transaction() as cur,
    ):
        cur.execute("INSERT INTO baton_node (name, location) VALUES (NULL, NULL)")
    assert not isinstance(failed.value, NodeUnreachable | ConfigError)


# -- nothing reads an error's message ------------------------------------------------------------

#: Names a handler's exception commonly goes by, besides the one it is bound to.
_EXC_NAMES = {"exc", "err", "error", "e", "ex"}
_PROBES = {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "__contains__"}
_REGEX = {"search", "match", "fullmatch", "findall", "finditer"}


def _message_branches(source: str) -> list[int]:
    """Lines that look into an error's text: ``x in str(exc)``, ``str(exc).startswith(...)``,
    ``re.search(p, str(exc))``, ``exc.args`` in a comparison, or the same through a name that
    was given that text (``message = str(exc)``). Comparing a whole message for equality (to
    log a repeated error once) is not a branch on its kind and is allowed."""
    tree = ast.parse(source)
    exc_names = set(_EXC_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.name:
            exc_names.add(node.name)

    def is_exc(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in exc_names

    def text_of_error(node: ast.AST) -> bool:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("str", "repr")
            and len(node.args) == 1
        ):
            return is_exc(node.args[0])
        if isinstance(node, ast.Attribute) and node.attr in ("args", "message", "msg"):
            return is_exc(node.value)
        if isinstance(node, ast.Subscript):
            return text_of_error(node.value)
        if isinstance(node, ast.JoinedStr):  # f"{exc}"
            return any(isinstance(v, ast.FormattedValue) and is_exc(v.value) for v in node.values)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            # str(exc).lower(), str(exc).strip(): still the error's text
            return node.func.attr in ("lower", "upper", "strip", "casefold") and text_of_error(
                node.func.value
            )
        return isinstance(node, ast.Name) and node.id in tainted

    tainted: set[str] = set()
    for _ in range(3):  # names given an error's text, and names given those
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and text_of_error(node.value):
                tainted |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            membership = any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            args = any(isinstance(o, ast.Attribute | ast.Subscript) for o in operands)
            if any(text_of_error(o) for o in operands) and (membership or args):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            probe = node.func.attr in _PROBES and text_of_error(node.func.value)
            regex = node.func.attr in _REGEX and any(text_of_error(a) for a in node.args)
            if probe or regex:
                lines.append(node.lineno)
    return sorted(lines)


def test_the_message_scan_finds_what_it_looks_for() -> None:
    bad = {
        'try:\n    f()\nexcept OSError as boom:\n    if "locked" in str(boom):\n        pass\n': 4,
        'try:\n    f()\nexcept E as exc:\n    text = str(exc)\n    ok = "busy" not in text\n': 5,
        "if str(exc).startswith('no such table'):\n    pass\n": 1,
        "if re.search('busy', str(e)):\n    pass\n": 1,
        "if exc.args[0] == 'x':\n    pass\n": 1,
        "if 'baton_' in f'{err}':\n    pass\n": 1,
        "message = str(exc).lower()\nif 'locked' in message:\n    pass\n": 2,
    }
    for source, line in bad.items():
        assert _message_branches(source) == [line], source
    fine = [
        "if str(exc) != said:\n    said = str(exc)\n",  # a repeated line logged once
        "if '$baton.' in text:\n    pass\n",
        "raise CascadeInputError(str(exc)) from None\n",
        "if isinstance(exc, NodeUnreachable):\n    pass\n",
        "detail = str(exc) or type(exc).__name__\n",
    ]
    for source in fine:
        assert _message_branches(source) == [], source


def test_no_source_file_branches_on_an_error_message() -> None:
    found = {
        str(path.relative_to(SOURCE.parent)): lines
        for path in sorted(SOURCE.rglob("*.py"))
        if (lines := _message_branches(path.read_text()))
    }
    assert found == {}


#: Names under which code holds a state: a comparison of one of them with a string literal
#: that is some state enum's value is a state travelling as text (issue 29).
_STATE_NAMES = {"role", "state", "outcome", "phase", "mode", "detail", "want", "type_"}


def _state_words() -> set[str]:
    """The values of every string enum baton defines (its states, roles, outcomes, phases)."""
    words: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and {"StrEnum", "Enum"} & set(bases):
                for stmt in node.body:
                    value = getattr(stmt, "value", None)
                    if isinstance(stmt, ast.Assign) and isinstance(value, ast.Constant):
                        words.add(str(value.value))
    return words


def _state_literals(source: str, words: set[str]) -> list[int]:
    """Lines comparing a state-named value (``x.role``, ``row["state"]``, ``mode``) with a
    string literal (or a set of them) that is a state's value."""

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return str(node.slice.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = node.args[0]  # row.get("role")
            return str(first.value) if isinstance(first, ast.Constant) else None
        return None

    def literals(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            return [
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
        return []

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = any(name_of(o) in _STATE_NAMES for o in operands)
            if named and any(w in words for o in operands for w in literals(o)):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_state_literal_scan_finds_what_it_looks_for() -> None:
    words = {"leader", "tracking", "low-latency"}
    bad = {
        "if stream.role == 'leader':\n    pass\n": 1,
        "if result.detail in {'tracking', 'paused'}:\n    pass\n": 1,
        "ok = row['role'] != 'leader'\n": 1,
        "if mode == 'low-latency':\n    pass\n": 1,
        "x = rep.get('role') == 'leader'\n": 1,
    }
    for source, line in bad.items():
        assert _state_literals(source, words) == [line], source
    fine = [
        "if stream.role is Role.LEADER:\n    pass\n",
        "if new_root == 'leader':\n    pass\n",  # a node's name, not a state
        "if rec['op'] == 'leader':\n    pass\n",
    ]
    for source in fine:
        assert _state_literals(source, words) == [], source


def test_no_source_file_compares_a_state_with_a_string_literal() -> None:
    words = _state_words()
    assert {"leader", "follower", "tracking", "applying", "low-latency"} <= words
    found = {
        str(path.relative_to(SOURCE.parent)): lines
        for path in sorted(SOURCE.rglob("*.py"))
        if (lines := _state_literals(path.read_text(), words))
    }
    assert found == {}


def test_a_channel_code_turns_back_into_its_kind_in_one_place() -> None:
    from baton.errors import (
        BadChannel,
        ChannelError,
        ChannelFinished,
        ChannelRefused,
        ChannelUnavailable,
    )

    cases: dict[int, type[ChannelError]] = {
        4100: ChannelFinished,
        4503: ChannelUnavailable,
        4429: ChannelUnavailable,
        4400: BadChannel,
        4404: BadChannel,
        4403: ChannelRefused,
        4999: ChannelRefused,
    }
    for code, kind in cases.items():
        err = ChannelError.from_code(code, "why")
        assert type(err) is kind and (err.code, err.reason) == (code, "why")
