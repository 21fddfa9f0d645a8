"""Each verb declared once (:mod:`baton.cascade.verbs`) is a ``baton cascade`` command and a
``/v1/cascade`` route, with the same arguments: the command line's positional arguments and
options, the API's body or query fields."""

from __future__ import annotations

from pathlib import Path

import click

from baton.cascade.verbs import VERBS
from baton.cli.cascade import cascade
from baton.node.agent import NodeAgent
from baton.node.api import build_app
from tests.node.test_api import config


def test_every_verb_is_a_command_and_a_route_with_the_same_arguments(tmp_path: Path) -> None:
    app = build_app(NodeAgent(config(tmp_path, "n1")))
    spec = app.openapi()
    for verb in VERBS:
        cmd = cascade.commands[verb.name]
        assert isinstance(cmd, click.Command)
        names = {p.name for p in cmd.params} - {"help", "as_json"}
        assert names == set(verb.args.model_fields), verb.name
        assert cmd.help == verb.help
        route = spec["paths"][f"/v1/cascade/{verb.name}"]
        op = route["get" if verb.read else "post"]
        assert op["summary"] == verb.help.partition("\n")[0].rstrip(".")
        if not verb.read:
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            body = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
            assert set(body["properties"]) == set(verb.args.model_fields), verb.name
