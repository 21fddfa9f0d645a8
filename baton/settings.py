"""How every configuration of baton is read (the node's, its ``[channels]``, the store-failover
roles'): a pydantic-settings model, filled from sources in order of precedence, and one wording
of what is wrong with it.

* :class:`Settings` is the base: nothing is read implicitly (building one by keyword reads no
  environment variable); :meth:`Settings.load` merges the given sources (the first given wins,
  tables merged key by key), validates the whole, and turns the first problem into one
  :class:`~baton.errors.ConfigError` line that names the key, shows the value (never a
  secret's), and says what is expected or what to do. Nothing starts on a bad config.
* Sources: :class:`TomlFile` (a file, or one table of it), :class:`Values` (values already
  read, such as command-line options; ``None`` means not given), and :class:`Environment`,
  which reads the variables the model's fields declare with :class:`Env`: a variable is
  written next to the key it sets, at any depth (``BATON_TTL`` sets ``timings.ttl``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from baton.errors import ConfigError, redact_url
from baton.validation import Problem, first_problem


class Decode(Enum):
    """How an environment variable's text becomes a value."""

    TEXT = "text"
    """As it is (pydantic converts numeric strings)."""
    PAIRS = "pairs"
    """``k=v,k=v`` as a table."""
    JSON = "json"
    """A JSON object as a table."""


@dataclass(frozen=True, slots=True)
class Env:
    """Field metadata: the environment variable that sets this key (``Annotated[int,
    Env("BATON_CAPACITY")]``). ``clears``: sibling keys the variable replaces, whatever a
    lower source said (a Spark master from the environment replaces the file's remote)."""

    name: str
    decode: Decode = Decode.TEXT
    clears: tuple[str, ...] = ()


#: A declared variable: its declaration and the key path it sets.
Declared = tuple[Env, tuple[str, ...]]


def env_vars(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> dict[str, Declared]:
    """Every variable the model's fields declare, at any depth: name -> (declaration, key
    path)."""
    out: dict[str, Declared] = {}
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        for meta in field.metadata:
            if isinstance(meta, Env):
                out[meta.name] = (meta, path)
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out |= env_vars(sub, path)
    return out


class _Source(PydanticBaseSettingsSource):
    """A source that yields one nested table (pydantic-settings merges them by precedence)."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._data


class Values(_Source):
    """Values already read (command-line options, a table of another config); a ``None``
    value is a value not given."""

    def __init__(self, settings_cls: type[BaseSettings], values: Mapping[str, Any]) -> None:
        super().__init__(settings_cls, {k: v for k, v in values.items() if v is not None})


def read_toml(path: Path, table: str | None = None) -> dict[str, Any]:
    """The keys of the TOML file ``path`` (those of its ``[table]`` when it has one)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    if table is None:
        return data
    inner = data.get(table, data)
    if not isinstance(inner, dict):
        raise ConfigError(f"bad [{table}] in {path}: expected a table")
    return dict(inner)


class TomlFile(_Source):
    """A TOML file (none: no keys), or its ``[table]`` when it has one."""

    def __init__(
        self, settings_cls: type[BaseSettings], path: Path | None, table: str | None = None
    ) -> None:
        super().__init__(settings_cls, {} if path is None else read_toml(path, table))


class Environment(_Source):
    """The variables the model declares with :class:`Env`, from ``env``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        data: dict[str, Any] = {}
        given = [
            (var, decl, path) for var, (decl, path) in env_vars(settings_cls).items() if var in env
        ]
        # Clear first, then set: two variables that clear each other are both kept (and the
        # model says that they contradict each other).
        for _, decl, path in given:
            for sibling in decl.clears:
                _table(data, path)[sibling] = None
        for var, decl, path in given:
            _table(data, path)[path[-1]] = _decode(var, decl.decode, env[var])
        super().__init__(settings_cls, data)


def _table(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """The table of ``data`` that holds the key ``path`` (made when missing)."""
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    return node


def _decode(var: str, how: Decode, text: str) -> Any:
    if how is Decode.PAIRS:
        pairs = [p for p in text.split(",") if p]
        if not all("=" in p for p in pairs):
            raise ConfigError(f"{var}={text!r}: expected k=v pairs separated by commas")
        return dict(p.split("=", 1) for p in pairs)
    if how is Decode.JSON:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ConfigError(f"{var}: expected a JSON object (the table it sets)")
        return value
    return text


#: A key whose name looks like this never has its value shown.
SECRET_NAME = re.compile(r"(?i)secret|passw|credential|(token|key)$")
#: Plain words for pydantic's type errors (by error type, which is stable; the text is not).
EXPECTED = {
    "string_type": "expected a string (in quotes)",
    "path_type": "expected a path (a string in quotes)",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number of seconds",
    "float_parsing": "expected a number of seconds",
    "finite_number": "expected a finite number",
    "dict_type": "expected a table (k = v pairs)",
    "model_type": "expected a table (k = v pairs)",
    "model_attributes_type": "expected a table (k = v pairs)",
    "list_type": "expected a list",
}


class Settings(BaseSettings):
    """Base of baton's configurations. A subclass words its errors with :attr:`noun` and
    :attr:`key` (what its values and keys are called), :attr:`docs` (where the keys are
    listed) and :meth:`missing`."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, validate_default=True)

    #: What a value line starts with (``config capacity=0: ...``).
    noun: ClassVar[str] = "config"
    #: What a key is called (``unknown config key colour``).
    key: ClassVar[str] = "config key"
    docs: ClassVar[str] = "docs/"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Built by keyword (a test, a library user): those values only. The sources of a
        # running process are chosen by its loader and given to load().
        return (init_settings,)

    @classmethod
    def missing(cls, where: str) -> str:
        """What to do about a missing required key."""
        return f"set {where}"

    @classmethod
    def load(cls, *sources: PydanticBaseSettingsSource) -> Self:
        """Merge ``sources`` (the first wins) and validate; :class:`ConfigError`, one line,
        on the first problem."""
        try:
            # pydantic's mypy plugin types __init__ from the fields alone.
            return cls(_build_sources=(sources, {}))  # type: ignore[call-arg]
        except ValidationError as exc:
            raise ConfigError(cls.describe(exc)) from None

    @classmethod
    def describe(cls, exc: ValidationError) -> str:
        """The one line for ``exc``: the key, the value unless it may be secret, and what is
        expected (or what to do)."""
        p = _first(exc)
        noun, key, loc = cls.noun, cls.key, p.where
        msg = EXPECTED.get(p.kind) or p.message
        if p.kind == "missing":
            return f"{key} {loc} is missing: {cls.missing(loc)}"
        if p.kind == "extra_forbidden":
            return f"unknown {key} {loc}: remove it (see {cls.docs} for the keys)"
        if not loc:  # a whole-config check: its message names the keys involved
            return f"{noun}: {msg}"
        if any(SECRET_NAME.search(str(part)) for part in p.loc):
            return f"{noun} {loc}: {msg} (value not shown)"
        return f"{noun} {loc}={show(p.value)}: {msg}"


def _first(exc: ValidationError) -> Problem:
    """The problem to name: an unknown key before all others (a misspelt key is also the
    likeliest cause of a missing one), otherwise pydantic's first."""
    for err in exc.errors():
        if err["type"] == "extra_forbidden":
            loc = tuple(err["loc"])
            where = ".".join(str(part) for part in loc)
            return Problem(loc, where, str(err["msg"]), "extra_forbidden", err.get("input"))
    return first_problem(exc)


def show(value: object) -> str:
    """``value`` as it would be written in a TOML file: a URL's password redacted, a table's
    secret-looking entries hidden."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(redact_url(value))
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(
                f"{k!r}: {'...' if SECRET_NAME.search(str(k)) else show(v)}"
                for k, v in value.items()
            )
            + "}"
        )
    return repr(value)


__all__ = [
    "Decode",
    "Env",
    "Environment",
    "Settings",
    "TomlFile",
    "Values",
    "env_vars",
    "read_toml",
    "show",
]
