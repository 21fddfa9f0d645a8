"""Named contexts (as kubeconfig's): where a cluster's store, a node's API, the token file and a
cascade set are, so that a command need not be told on every run.

The file is ``$BATON_CONFIG``, else ``$XDG_CONFIG_HOME/baton/config.toml``, else
``~/.config/baton/config.toml``::

    current = "prod"

    [contexts.prod]
    store = "postgresql://baton@db1:5432/baton"
    api = "http://10.0.0.5:7400"
    token_file = "/home/me/.config/baton/prod.token"
    via = "postgresql://baton@db1:5432/orders"

The context in use is ``--context NAME`` (or ``BATON_CONTEXT``), else ``current``. Its values
are the defaults of ``--store``, ``--api``, ``--token-file`` and ``--via`` when neither the option
nor its environment variable is given. The file holds the token's *file*, never the token; it
is written with mode 0600 all the same (a store URL may hold a password).

A file that cannot be used (not TOML, an unknown key, a value that is not a string, a current
context that is not in it) is one :class:`ConfigError` naming the file and what to fix; nothing
is written then. A missing file is no contexts at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
import tomllib
from pathlib import Path

from baton.errors import ConfigError

#: Where the file is, when not in the default place.
CONFIG_ENV = "BATON_CONFIG"
#: The context to use instead of the file's current one.
CONTEXT_ENV = "BATON_CONTEXT"
#: What a context holds, in the order the file and ``context show`` give them.
KEYS = ("store", "api", "token_file", "via")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
#: The context ``baton --context NAME`` chose for this process (None: BATON_CONTEXT, else the
#: file's current one).
_chosen: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Context:
    name: str
    store: str | None = None
    api: str | None = None
    token_file: str | None = None
    via: str | None = None

    def values(self) -> dict[str, str]:
        """The keys it sets, in :data:`KEYS` order."""
        return {k: v for k in KEYS if (v := getattr(self, k)) is not None}


@dataclasses.dataclass(frozen=True, slots=True)
class Contexts:
    """The file as read: its contexts by name and the current one's name."""

    path: Path
    current: str | None
    contexts: dict[str, Context]


def config_path() -> Path:
    """Where the contexts file is (it need not exist)."""
    given = os.environ.get(CONFIG_ENV)
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "baton" / "config.toml"


def check_name(name: str) -> str:
    """A context's name: letters, digits, ``-`` and ``_`` (a bare TOML key, a shell word)."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"context name {name!r}: use 1 to 63 letters, digits, '-' or '_', starting with a "
            "letter or digit"
        )
    return name


def load(path: Path | None = None, *, repairing: bool = False) -> Contexts:
    """The contexts file (:func:`config_path` by default); none when it does not exist.
    ``repairing``: a current context that is not in the file is taken as none (``context use``
    mends it), instead of an error."""
    path = path or config_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Contexts(path, None, {})
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}): fix its permissions") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}): fix the file") from None
    unknown = sorted(set(data) - {"current", "contexts"})
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {unknown[0]!r}: the file holds 'current' and [contexts.NAME] "
            "tables only"
        )
    current = data.get("current")
    if current is not None and not isinstance(current, str):
        raise ConfigError(f"{path}: current must be a context's name in quotes")
    tables = data.get("contexts", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: contexts must be tables, [contexts.NAME]")
    found = {name: _context(path, name, table) for name, table in tables.items()}
    if current is not None and current not in found:
        if repairing:
            current = None
        else:
            raise ConfigError(
                f"{path}: current context {current!r} is not in the file: run 'baton context "
                f"use NAME' with one of {_names(found)}, or set current to one of them"
            )
    return Contexts(path, current, found)


def _names(found: dict[str, Context]) -> str:
    return ", ".join(sorted(found)) or "none (add one with 'baton context set NAME --store URL')"


def _context(path: Path, name: str, table: object) -> Context:
    where = f"{path}: [contexts.{name}]"
    try:
        check_name(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table of {', '.join(KEYS)}")
    for key, value in table.items():
        if key not in KEYS:
            raise ConfigError(f"{where}: unknown key {key!r}: the keys are {', '.join(KEYS)}")
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: {key} must be a non-empty string in quotes")
    return Context(name, **table)


def choose(name: str | None) -> None:
    """Use context ``name`` in this process (``baton --context NAME``)."""
    global _chosen  # noqa: PLW0603 - one choice per process, as the log format
    _chosen = None if name is None else check_name(name)


def in_use() -> Context | None:
    """The context a command uses: ``baton --context NAME``, else ``BATON_CONTEXT``, else the
    file's current one; None when there is none. A chosen name not in the file is an error."""
    found = load()
    name = _chosen or os.environ.get(CONTEXT_ENV) or found.current
    if name is None:
        return None
    if name not in found.contexts:
        raise ConfigError(
            f"{found.path}: no context {name!r} (from --context or {CONTEXT_ENV}): the contexts "
            f"are {_names(found.contexts)}"
        )
    return found.contexts[name]


def save(found: Contexts) -> None:
    """Write the file whole (mode 0600, its folder 0700 when made), replacing it atomically: a
    reader never sees half of it. Comments in the old file are not kept."""
    lines = [] if found.current is None else [f"current = {_quoted(found.current)}"]
    for name in sorted(found.contexts):
        lines += ["", f"[contexts.{name}]"]
        lines += [f"{k} = {_quoted(v)}" for k, v in found.contexts[name].values().items()]
    text = "\n".join(lines).lstrip("\n") + "\n"
    try:
        found.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".config.", dir=found.path.parent)  # mode 0600
    except OSError as exc:
        raise ConfigError(
            f"{found.path}: cannot be written ({exc.strerror}): check its folder's permissions, "
            f"or name another file with {CONFIG_ENV}"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(found.path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise


def _quoted(value: str) -> str:
    """``value`` as a TOML basic string: quote, backslash and control characters escaped."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


__all__ = [
    "CONFIG_ENV",
    "CONTEXT_ENV",
    "KEYS",
    "Context",
    "Contexts",
    "check_name",
    "choose",
    "config_path",
    "in_use",
    "load",
    "save",
]
