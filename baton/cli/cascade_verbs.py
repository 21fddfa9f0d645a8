"""The ``baton cascade`` commands generated from the verbs' declarations
(:data:`baton.cascade.verbs.VERBS`): one click command per verb, its arguments and options
read from the verb's argument model, its output what the verb shows (lines and tables), or
with ``-o json|yaml`` (``--json``) its result, as every command prints one
(:mod:`baton.cli.output`). A read also takes ``--watch [SECONDS]``. ``status`` draws the set
as a tree (:mod:`baton.cli.cascade_tree`) from the lines and cells the verb shows."""

from __future__ import annotations

import contextlib
import enum
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, Union, get_args, get_origin

import click
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from baton.cascade import commands, table_diff
from baton.cascade.verb import ON_THIS_HOST, Args, Verb, is_host_path
from baton.cli import cascade_tree
from baton.cli.output import Output, Shown, emit, output_of, output_params
from baton.cli.watch import watch, watch_param
from baton.spark.diff import session_differ
from baton.validation import first_problem

# compare and repair run on this process's Spark session, built when one is first used.
table_diff.use_differ(session_differ)


def _is_argument(field: FieldInfo) -> bool:
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get("cli") == "argument"


def _base(annotation: Any) -> Any:
    """``str`` of ``str | None`` (and of ``Annotated[str, ...]``, which pydantic unwraps)."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return inner[0] if len(inner) == 1 else str
    return annotation


def _metavar(name: str, field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("metavar"), str):
        return str(extra["metavar"])
    return "NODE" if name in ("node", "provider", "old") else name.upper()


def _type(field: FieldInfo) -> Any:
    base = _base(field.annotation)
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return click.Choice([str(m.value) for m in base])
    if is_host_path(field.metadata):
        return click.Path(dir_okay=False)
    return {int: int, float: float}.get(base, str)


def _param(name: str, field: FieldInfo, via: click.Option) -> click.Parameter:
    if name == "via":
        return via
    if _is_argument(field):
        if get_origin(_base(field.annotation)) is list:  # NAME... (none or more)
            return click.Argument([name], nargs=-1, metavar=f"[{_metavar(name, field)}]...")
        return click.Argument([name], metavar=name.upper(), type=_type(field))
    flag = "--" + name.replace("_", "-")
    if _base(field.annotation) is bool:
        return click.Option([flag], is_flag=True, default=False, help=field.description)
    kwargs: dict[str, Any] = {}
    if not field.is_required():  # an explicit default of None would satisfy "required"
        default = None if field.default_factory is not None else field.default
        kwargs = {"default": default, "show_default": default is not None}
    return click.Option(
        [flag],
        required=field.is_required(),
        type=_type(field),
        metavar=_metavar(name, field),
        help=field.description,
        **kwargs,
    )


def _validated(model: type[BaseModel], values: dict[str, Any]) -> Any:
    """``values`` as ``model``, or a usage error in one line naming the option or argument."""
    try:
        return model.model_validate(values, context=ON_THIS_HOST)
    except ValidationError as exc:
        p = first_problem(exc)
        if p.kind == "value_error":  # baton's own check: its message says it all
            raise click.UsageError(commands.one_line(p.message)) from None
        field = model.model_fields.get(p.where)
        if field is not None and _is_argument(field):
            where = p.where.upper()
        else:
            where = "--" + p.where.replace("_", "-")
        raise click.UsageError(commands.one_line(f"bad {where} {p.value!r}: {p.message}")) from None


#: How the command line draws a verb's result when it draws more than the verb shows: the
#: verb's lines and tables, its result and whether the wide columns are asked for.
_VIEWS: dict[str, Callable[[list[Any], Any, bool], list[Shown]]] = {
    "status": cascade_tree.status,
}


class _Bar:
    """compare's and repair's progress on the terminal (stderr) while the verb runs: tasks
    done of all, the time so far and the time left."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._tasks: dict[tuple[str, str, str], TaskID] = {}

    def __call__(self, node: str, what: str, table: str, done: int, total: int) -> None:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("Spark tasks"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.start()
        key = (node, what, table)
        if key not in self._tasks:
            self._tasks[key] = self._progress.add_task(f"{what} {table} at {node}", total=total)
        self._progress.update(self._tasks[key], completed=done, total=total)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


@contextlib.contextmanager
def _progress_bar() -> Iterator[None]:
    """A progress bar for the verb's Spark work, on a terminal only (a script reads none)."""
    if not sys.stderr.isatty():
        yield
        return
    bar = _Bar()
    table_diff.use_progress(bar)
    try:
        yield
    finally:
        table_diff.use_progress(None)
        bar.close()


def command(
    verb: Verb[Any, Any],
    via: click.Option,
    resolve_via: Callable[[str | None], str],
    handled: Callable[[Callable[..., None]], Callable[..., None]],
) -> click.Command:
    """The click command of ``verb``. ``via``: the shared ``--via`` option; ``resolve_via``
    turns its value into a location (or says how to give one); ``handled`` wraps the
    callback so that errors are one line with the CLI's exit codes."""
    model: type[Args] = verb.cli.args if verb.cli is not None else verb.args
    params = [_param(name, field, via) for name, field in model.model_fields.items()]
    # Arguments first, in declaration order, as click shows them.
    params.sort(key=lambda p: not isinstance(p, click.Argument))
    params += output_params()
    if verb.read:
        params.append(watch_param())
    via_field = model.model_fields.get("via")
    drawn = _VIEWS.get(verb.name)

    def render(out: Output, args: Args, result: Any) -> None:
        def view(wide: bool) -> list[Shown]:
            shown: list[Shown] = list(verb.show(args, result))
            return drawn(shown, result, wide) if drawn is not None else shown

        emit(out, verb.printed(args, result), view)

    def callback(**given: Any) -> None:
        out = output_of(given)
        every = given.pop("watch", None)
        if via_field is not None and via_field.is_required():
            given["via"] = resolve_via(given["via"])
        values = {k: v for k, v in given.items() if v is not None}
        args = _validated(model, values)
        if verb.cli is not None:
            args = _validated(verb.args, verb.cli.convert(args))
        if every is not None:
            watch(out, every, lambda: verb.run(args), lambda r: render(out, args, r))
        with _progress_bar():
            result = verb.run(args)
        render(out, args, result)
        if verb.fails is not None and verb.fails(result):
            sys.exit(1)

    return click.Command(verb.name, params=params, callback=handled(callback), help=verb.help)
