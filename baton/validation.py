"""What every configuration and spec model of baton shares: strict numeric types (no booleans,
no NaN or infinity) and one reading of pydantic's first error (where, what, which kind), which
each caller words for its own input (a config key, an object's field, a workload's spec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError


def _not_a_bool(value: object) -> object:
    """Refuse ``true``/``false`` for a number: pydantic's lax mode would take them as 1 and 0
    (``ttl = true`` started a node with a 1 s ttl). Numeric strings still pass, as every
    ``BATON_*`` environment variable is a string."""
    if isinstance(value, bool):
        raise ValueError("expected a number, not true or false")
    return value


#: An integer that is not a boolean.
Int = Annotated[int, BeforeValidator(_not_a_bool)]
#: Seconds: a finite number that is not a boolean.
Seconds = Annotated[float, BeforeValidator(_not_a_bool), Field(allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class Problem:
    """The first problem pydantic found."""

    loc: tuple[str | int, ...]
    #: ``loc`` dotted (``spark.master``), "" for the whole model.
    where: str
    #: Pydantic's message, without its ``Value error, `` prefix.
    message: str
    #: Pydantic's error type (``missing``, ``extra_forbidden``, ``int_parsing``...).
    kind: str
    value: Any


def first_problem(exc: ValidationError) -> Problem:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    return Problem(
        loc=loc,
        where=".".join(str(p) for p in loc),
        message=str(err["msg"]).removeprefix("Value error, "),
        kind=str(err["type"]),
        value=err.get("input"),
    )


__all__ = ["Int", "Problem", "Seconds", "first_problem"]
