"""The typed frames write exactly the bytes of the protocol (compact JSON, keys in the documented
order, optional keys left out), read back to the same models, and refuse bad client frames
with the one-line reasons clients have always been given. No server: the models alone."""

from __future__ import annotations

import pytest

from baton.channels.protocol import (
    Auth,
    Gap,
    Pub,
    Publish,
    Refused,
    Since,
    Subscribe,
    Subscribed,
    Survey,
    Unsubscribe,
    Unsubscribed,
    _Frame,
    dumps,
    parse_frame,
    parse_node_frame,
)
from baton.errors import BadFrame

NODE_FRAMES: list[tuple[_Frame, str]] = [
    (
        Subscribed(channel="tick:a", epoch=3, offset=7, recovered=False, data={"n": 1}),
        '{"type":"subscribed","channel":"tick:a","epoch":3,"offset":7,"recovered":false,'
        '"data":{"n":1}}',
    ),
    (
        Pub(channel="tick:a", epoch=3, offset=8, data={"at": "é"}, ts=1.5),
        '{"type":"pub","channel":"tick:a","epoch":3,"offset":8,"data":{"at":"\\u00e9"},"ts":1.5}',
    ),
    (
        Gap(channel="tick:a", epoch=3, offset=9, reason="upstream failed"),
        '{"type":"gap","channel":"tick:a","epoch":3,"offset":9,"reason":"upstream failed"}',
    ),
    (
        Unsubscribed(channel="tick:a", code=4100, reason="finished"),
        '{"type":"unsubscribed","channel":"tick:a","code":4100,"reason":"finished"}',
    ),
    (
        Refused(channel="tick:a", code=4403, reason="no"),
        '{"type":"refused","channel":"tick:a","code":4403,"reason":"no"}',
    ),
]


@pytest.mark.parametrize(("frame", "text"), NODE_FRAMES, ids=lambda x: getattr(x, "type", ""))
def test_node_frames_are_written_byte_for_byte(frame: _Frame, text: str) -> None:
    assert dumps(frame) == text
    assert parse_node_frame(text) == frame


def test_client_frames_round_trip_with_optional_keys_left_out() -> None:
    relay = Subscribe(channel="tick:a", relay=3, node="n1", since=Since(epoch=3, offset=4))
    assert dumps(relay) == (
        '{"type":"subscribe","channel":"tick:a","relay":3,"node":"n1",'
        '"since":{"epoch":3,"offset":4}}'
    )
    assert dumps(Subscribe(channel="tick:a")) == '{"type":"subscribe","channel":"tick:a"}'
    for frame in (relay, Subscribe(channel="x:y"), Unsubscribe(channel="x:y"), Auth(token="t")):
        assert parse_frame(dumps(frame)) == frame
    # A publication's data may be null, and is kept.
    assert (
        dumps(Publish(channel="x:y", data=None)) == '{"type":"publish","channel":"x:y","data":null}'
    )
    # A newer peer's extra keys are ignored.
    assert parse_frame('{"type":"unsubscribe","channel":"x:y","later":1}') == Unsubscribe(
        channel="x:y"
    )


def test_node_frames_this_side_does_not_know_are_skipped() -> None:
    assert parse_node_frame('{"type":"presence","channel":"x:y"}') is None
    assert parse_node_frame("not json") is None


def test_a_survey_answer_keeps_its_keys() -> None:
    assert Survey(epoch=2, offset=5, data=[1]).wire() == {
        "ok": True,
        "epoch": 2,
        "offset": 5,
        "data": [1],
    }
    recovered = Survey(epoch=2, offset=5, recovered=True, frames=("a",)).wire()
    assert recovered == {"ok": True, "epoch": 2, "offset": 5, "recovered": True, "frames": ("a",)}


REFUSED = [
    ('{"type":"subscribe"}', "bad frame: subscribe needs a channel (a string like 'tick:clock')"),
    ('{"type":"subscribe","channel":""}', "bad frame: subscribe needs a channel"),
    ('{"type":"subscribe","channel":"a:b","since":[1]}', 'since must be {"epoch": E, "offset": O}'),
    ('{"type":"subscribe","channel":"a:b","since":{"epoch":true,"offset":0}}', "since.epoch must"),
    ('{"type":"subscribe","channel":"a:b","since":{"epoch":1}}', "since.offset must"),
    ('{"type":"subscribe","channel":"a:b","relay":2.5}', "subscribe.relay must be an integer"),
    ('{"type":"subscribe","channel":"a:b","node":""}', "subscribe.node must be a node id"),
    ('{"type":"publish","channel":""}', "bad frame: publish needs data"),
    ('{"type":"auth"}', "bad frame: auth needs a token (a string)"),
    ('{"type":"dance"}', "bad frame: unknown type 'dance'"),
    ('{"type":["x"]}', "bad frame: unknown type '?'"),
    ("{}", "bad frame: unknown type '?'"),
]


@pytest.mark.parametrize(("raw", "reason"), REFUSED)
def test_bad_client_frames_are_refused_with_one_line(raw: str, reason: str) -> None:
    with pytest.raises(BadFrame) as caught:
        parse_frame(raw)
    assert caught.value.code == 4000
    assert reason in caught.value.reason and "\n" not in caught.value.reason
