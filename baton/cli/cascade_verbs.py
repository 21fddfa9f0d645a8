"""The ``baton cascade`` commands generated from the verbs' declarations
(:data:`baton.cascade.verbs.VERBS`): one click command per verb, its arguments and options
read from the verb's argument model, its output the verb's lines."""

from __future__ import annotations

import json
import types
from typing import Any, Union, get_args, get_origin

import click
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from baton.cascade.verbs import Verb
from baton.validation import first_problem


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


def _param(name: str, field: FieldInfo, via: click.Option) -> click.Parameter:
    if name == "via":
        return via
    if _is_argument(field):
        return click.Argument([name], metavar=name.upper())
    flag = "--" + name.replace("_", "-")
    base = _base(field.annotation)
    if base is bool:
        return click.Option([flag], is_flag=True, default=False, help=field.description)
    kwargs: dict[str, Any] = {}
    if not field.is_required():  # an explicit default of None would satisfy "required"
        default = None if field.default_factory is not None else field.default
        kwargs = {"default": default, "show_default": default is not None}
    return click.Option(
        [flag],
        required=field.is_required(),
        type={int: int, float: float}.get(base, str),
        metavar=_metavar(name, field),
        help=field.description,
        **kwargs,
    )


def command(
    verb: Verb[Any, Any],
    via: click.Option,
    resolve_via: Any,
    handled: Any,
) -> click.Command:
    """The click command of ``verb``. ``via``: the shared ``--via`` option; ``resolve_via``
    turns its value into a location (or says how to give one); ``handled`` wraps the
    callback so that errors are one line with the CLI's exit codes."""
    params = [_param(name, field, via) for name, field in verb.args.model_fields.items()]
    # Arguments first, in declaration order, as click shows them.
    params.sort(key=lambda p: not isinstance(p, click.Argument))
    if verb.json:
        params.append(click.Option(["--json", "as_json"], is_flag=True, help="Print JSON."))

    def callback(**given: Any) -> None:
        as_json = given.pop("as_json", False)
        if "via" in given:
            given["via"] = resolve_via(given["via"])
        values = {k: v for k, v in given.items() if v is not None}
        try:
            args = verb.args.model_validate(values)
        except ValidationError as exc:
            p = first_problem(exc)
            if p.kind == "value_error":  # baton's own check: its message says it all
                raise click.UsageError(p.message) from None
            option = p.where.replace("_", "-")
            raise click.UsageError(f"bad {option} {p.value!r}: {p.message}") from None
        result = verb.run(args)
        if as_json:
            click.echo(json.dumps(verb.result(result), indent=2))
            return
        for line in verb.lines(args, result):
            click.echo(line)

    return click.Command(verb.name, params=params, callback=handled(callback), help=verb.help)
