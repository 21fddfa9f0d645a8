"""Row images as JSON text, bit for bit: the one codec for every value that crosses capture,
copy and apply.

Events carry row images (``ev_key``, ``ev_data``) and the initial copy carries table rows, both
as JSON text. JSON has no blobs, no infinities and only one kind of number, so a few values are
written as one-key tagged objects that no capture produces otherwise:

``{"$baton.blob": "<hex>"}``   a BLOB / bytea value
``{"$baton.real": "inf"}``     a double infinity (``"-inf"``) where JSON numbers cannot say it
``{"$baton.num": "<text>"}``   an exact decimal (PostgreSQL ``numeric`` read by a copy)

Numbers are read so that nothing is rounded twice: a double written with enough digits comes
back bit for bit (it is rounded correctly from its text), and for a target that can hold more
(PostgreSQL ``numeric``) an integer stays a Python ``int`` of any size and a decimal becomes an
:class:`ExactNumber`, a ``float`` that also keeps its text, which the target casts itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import orjson

BLOB = "$baton.blob"
REAL = "$baton.real"
NUM = "$baton.num"

_INF = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


class ExactNumber(float):
    """A number read from JSON text: the nearest double, plus the text it was read from."""

    text: str

    def __new__(cls, text: str) -> ExactNumber:
        self = super().__new__(cls, text)
        self.text = text
        return self


def _tagged(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        if BLOB in obj:
            return bytes.fromhex(obj[BLOB])
        if REAL in obj and obj[REAL] in _INF:
            return _INF[obj[REAL]]
        if NUM in obj:
            return ExactNumber(obj[NUM])
    return obj


def _integer(text: str) -> int | float:
    # PostgreSQL writes a double's minus zero as "-0": an integer has no minus zero.
    return -0.0 if text == "-0" else int(text)


_DECODER = json.JSONDecoder(parse_float=ExactNumber, parse_int=_integer, object_hook=_tagged)


def decode(text: str, exact: bool = False) -> Any:
    """A row image (or a copied row) from its JSON text; raises ``ValueError`` on bad JSON.

    By default numbers are read by orjson (several times faster): integers within 64 bits and
    doubles come back exactly (a double is rounded correctly from its text); ``exact`` keeps
    longer decimals and integers too (:class:`ExactNumber`, ``int``), for targets whose columns
    can hold them (PostgreSQL ``numeric``)."""
    if exact or "$baton." in text or "-0" in text:  # orjson reads "-0" as the integer 0
        return _DECODER.decode(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _DECODER.decode(text)  # Infinity / NaN (a copied double): the standard reader


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {BLOB: bytes(value).hex()}
    if isinstance(value, Decimal):
        return {NUM: str(value)}
    if hasattr(value, "isoformat"):  # dates and times: the text every database casts back
        return value.isoformat()
    return str(value)


def encode_row(values: Sequence[Any]) -> str:
    """A table row (as a driver returns it) as JSON text that :func:`decode` reads back to the
    same values. Floats are written by ``repr`` (the shortest exact text); ±inf and NaN as
    ``Infinity``/``NaN``, which :func:`decode` reads."""
    return json.dumps(list(values), default=_default, separators=(",", ":"))


def sqlite_value_sql(expr: str, signed_zero: bool = True) -> str:
    """SQL for SQLite (in a capture trigger) giving ``expr`` as a JSON value for
    ``json_object``, exact for every storage class: ``json_object`` alone writes REAL with 15
    significant digits and refuses BLOB, and ``printf('%!.17g')`` does not round-trip every
    double in SQLite 3.40 (``%!.20e`` does). Minus zero keeps its sign when ``signed_zero``
    (``atan2`` tells it apart, SQLite prints both zeros alike; builds without the math
    functions lack it)."""
    v = expr
    minus_zero = (
        f"WHEN {v} = 0.0 AND atan2({v}, -1.0) < 0 THEN json('-0.0') " if signed_zero else ""
    )
    real = (
        f"CASE WHEN {v} = {v} * 2.0 AND {v} <> 0.0 THEN json_object('{REAL}', "
        f"CASE WHEN {v} > 0 THEN 'inf' ELSE '-inf' END) "
        f"{minus_zero}ELSE json(printf('%!.20e', {v})) END"
    )
    return (
        f"CASE typeof({v}) WHEN 'real' THEN {real} "
        f"WHEN 'blob' THEN json_object('{BLOB}', hex({v})) ELSE {v} END"
    )


__all__ = ["ExactNumber", "decode", "encode_row", "sqlite_value_sql"]
