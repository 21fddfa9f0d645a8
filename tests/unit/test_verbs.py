"""Each verb declared once (:mod:`baton.cascade.verbs`) is a ``baton cascade`` command and a
``/v1/cascade`` route, with the same arguments: the command line's positional arguments and
options, the API's body or query fields; and a bad argument is one line on the command line
(exit 2) and a 422 naming the field over HTTP, before anything is opened."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import click
import httpx
import pytest

from baton.cascade.verb import Args, Verb
from baton.cascade.verbs import VERBS
from baton.cli.cascade import cascade
from baton.node.agent import NodeAgent
from baton.node.api import build_app
from tests.node.test_api import client, config

#: Every cascade command is a verb, but for ``run`` (it serves nodes: no route).
NOT_VERBS = {"run"}


def _cli_model(verb: Verb[Any, Any]) -> type[Args]:
    return verb.cli.args if verb.cli is not None else verb.args


def test_every_verb_is_a_command_and_a_route_with_the_same_arguments(tmp_path: Path) -> None:
    app = build_app(NodeAgent(config(tmp_path, "n1")))
    spec = app.openapi()
    assert set(cascade.commands) - NOT_VERBS == {v.name for v in VERBS}
    routes = {p.removeprefix("/v1/cascade/") for p in spec["paths"] if "/v1/cascade/" in p}
    assert routes == {v.name for v in VERBS}
    for verb in VERBS:
        cmd = cascade.commands[verb.name]
        assert isinstance(cmd, click.Command)
        names = {p.name for p in cmd.params} - {"help"}
        # Every command prints in every format (the shared options); a read can be watched.
        shared = {"output_format", "as_json", "no_headers"} | ({"watch"} if verb.read else set())
        assert shared <= names, verb.name
        assert names - shared == set(_cli_model(verb).model_fields), verb.name
        assert cmd.help == verb.help
        route = spec["paths"][f"/v1/cascade/{verb.name}"]
        op = route["get" if verb.read else "post"]
        assert op["summary"] == verb.help.partition("\n")[0].rstrip(".")
        if verb.read:
            fields = {p["name"] for p in op["parameters"]}
        else:
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            fields = set(spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"])
        assert fields == set(verb.args.model_fields), verb.name


#: A location no store takes (too long): refused by the argument model, before anything opens.
TOO_LONG = "sqlite:///" + "x" * 4096


def _bad(model: type[Args]) -> tuple[dict[str, Any], str]:
    """Arguments for ``model`` with one bad value (``via``, or the new root's name), and the
    field it names."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            base: Any = field.annotation
            is_enum = isinstance(base, type) and issubclass(base, enum.Enum)
            # A count (sync's K) takes a good one: the bad value is the one named below.
            values[name] = next(iter(base)).value if is_enum else 1 if base is int else "x"
    if "via" in model.model_fields:
        return {**values, "via": TOO_LONG}, "via"
    return {**values, "name": "bad name"}, "name"


def _argv(verb: Verb[Any, Any], values: dict[str, Any]) -> list[str]:
    cmd = cascade.commands[verb.name]
    argv = [verb.name]
    for p in cmd.params:
        if p.name in values:
            value = str(values[p.name])
            argv += [value] if isinstance(p, click.Argument) else [p.opts[0], value]
    return argv


@pytest.mark.parametrize("verb", VERBS, ids=[v.name for v in VERBS])
def test_a_bad_argument_is_one_line_on_the_command_line(verb: Verb[Any, Any]) -> None:
    values, field = _bad(_cli_model(verb))
    with pytest.raises(click.UsageError) as caught:
        cascade.main(_argv(verb, values), prog_name="baton cascade", standalone_mode=False)
    message = caught.value.format_message()
    assert caught.value.exit_code == 2 and "\n" not in message, message
    assert ("--via" if field == "via" else "node name") in message, message


async def test_a_bad_argument_is_a_422_naming_the_field(tmp_path: Path) -> None:
    agent = NodeAgent(config(tmp_path, "n1"))
    async with client(agent) as c:
        for verb in VERBS:
            values, field = _bad(verb.args)
            res: httpx.Response
            if verb.read:
                res = await c.get(f"/v1/cascade/{verb.name}", params=values)
            else:
                res = await c.post(f"/v1/cascade/{verb.name}", json=values)
            assert res.status_code == 422, (verb.name, res.text)
            named = [e["loc"][-1] for e in res.json()["detail"]]
            assert field in named, (verb.name, named)
            assert "x" * 100 not in res.text  # the rejected value is not echoed
