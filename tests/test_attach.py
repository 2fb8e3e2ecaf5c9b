"""The attach protocol (gpuwatch/attach.py): every message through its encoding and back, and the lines a
wrapper or a daemon must refuse, each with a one-line reason."""

from __future__ import annotations

import json

import pytest

from gpuwatch.attach import (
    MAX_LINE_BYTES,
    Attach,
    Attached,
    Beat,
    Event,
    Exited,
    LineFramer,
    ProtocolError,
    Restarted,
    decode_reply,
    decode_request,
    encode,
    text_refusal,
)
from gpuwatch.heartbeat import Heartbeat

HEARTBEAT = {"pid": 7, "steps_total": 12, "last_step_unix": 1.5, "steps_per_s": None, "updated_unix": 2.0,
             "paused": False, "rank": 1}


@pytest.mark.parametrize("message", [
    Attach(pid=42, argv=["python", "train.py", "--lr", "0.1"]),
    Attach(pid=42, argv=["torchrun", "x.py"], name="yolo", gpus=["0000:28:00.0"], restart="on-failure:3",
           run_id="r-1", paused=True, reason="hot: junction 101 °C", job_id="4711"),
    Beat(),
    Beat(heartbeats=[HEARTBEAT, HEARTBEAT | {"rank": 0}]),
    Exited(code=3, restarting=True),
    Exited(code=-9, restarting=False),
    Exited(code=-2, restarting=False, signalled=2),
    Restarted(pid=43),
], ids=lambda m: type(m).__name__)
def test_requests_round_trip(message: object) -> None:
    line = encode(message)  # type: ignore[arg-type]
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one JSON line, whatever the reason's text
    assert decode_request(line.rstrip(b"\n")) == message


@pytest.mark.parametrize("message", [
    Attached(ok=True, run_id="r-1", name="yolo", interval_s=1.0),
    Attached(ok=False, message="not permitted: pid 42 is not yours"),
    Event(event="pause", reason="hot"),
    Event(event="resume"),
    Event(event="stop", reason="gpuwatch stop by alice"),
    Event(event="hung", reason="no heartbeat for 1800 s"),
], ids=lambda m: f"{type(m).__name__}-{getattr(m, 'event', getattr(m, 'ok', ''))}")
def test_replies_round_trip(message: Attached | Event) -> None:
    assert decode_reply(encode(message)) == message


def test_a_heartbeat_as_the_wrapper_relays_it_fits_a_beat() -> None:
    from dataclasses import asdict

    beat = Beat(heartbeats=[asdict(Heartbeat(pid=1, steps_total=5, last_step_unix=None, steps_per_s=None,
                                             updated_unix=3.0, rank=r, world_size=64)) for r in range(64)])
    line = encode(beat)
    assert len(line) < MAX_LINE_BYTES and decode_request(line) == beat


def test_unknown_keys_are_ignored_a_newer_peer_still_understood() -> None:
    assert decode_request(b'{"cmd":"restarted","pid":5,"extra":1}') == Restarted(pid=5)
    assert decode_reply(b'{"event":"resume","since":3}') == Event(event="resume")
    attach = decode_request(b'{"cmd":"attach","pid":5,"argv":["a"],"v":2,"future":true}')
    assert isinstance(attach, Attach) and attach.v == 2 and attach.restart == "no" and attach.gpus is None


@pytest.mark.parametrize("line, said", [
    (b"", "not JSON"),
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"cmd":"launch"}', "unknown cmd 'launch'"),
    (b'{"pid":1}', "unknown cmd None"),
    (b'{"cmd":"attach","argv":["a"]}', "attach: no pid"),
    (b'{"cmd":"attach","pid":"many","argv":["a"]}', "attach: pid is not an integer"),
    (b'{"cmd":"attach","pid":1,"argv":5}', "attach: argv is not a list of strings"),
    (b'{"cmd":"beat","heartbeats":{"pid":1}}', "beat: heartbeats is not a list of objects"),
    (b'{"cmd":"beat","heartbeats":[1]}', "beat: heartbeats is not a list of objects"),
    (b'{"cmd":"exited","code":1}', "exited: restarting is not true or false"),
    (b'{"cmd":"restarted"}', "restarted: no pid"),
    (b'"attach"', "not a JSON object"),
    # Issue 46 item 6: every string a user sends is bounded and printable, keys and nested ones included.
    (b'{"cmd":"attach","pid":5,"argv":["a"],"job_id":"\\ud800"}', "holds '\\ud800'"),
    (b'{"cmd":"attach","pid":5,"argv":["a"],"job_id":"\xed\xa0\x80"}', "holds '\\ud800'"),  # raw UTF-8 too
    (b'{"cmd":"attach","pid":5,"argv":["a"],"reason":"\\u001b]0;owned\\u0007"}', "holds '\\x1b'"),
    (b'{"cmd":"attach","pid":5,"argv":["a\\u001b[2J"]}', "holds '\\x1b'"),
    (b'{"cmd":"attach","pid":5,"argv":["a"],"name":"x\\u009b"}', "holds '\\x9b'"),  # C1 CSI
    (b'{"cmd":"beat","heartbeats":[{"held_by":"a\\nb"}]}', "holds '\\n'"),
    (b'{"cmd":"beat","heartbeats":[{"\\u001b":1}]}', "holds '\\x1b'"),
    (b'{"cmd":"attach","pid":5,"argv":["a"],"job_id":"' + b"1" * 65 + b'"}', "job_id of 65 characters"),
    (b'{"cmd":"attach","pid":5,"argv":["a"],"reason":"' + b"r" * 257 + b'"}', "reason of 257 characters"),
    (b'{"cmd":"attach","pid":5,"argv":["' + b"a" * 4097 + b'"]}', "4097 characters (at most 4096)"),
    (b"\xff{}", "not JSON"),
    # Issue 46 item 9: numbers and nesting that used to raise OverflowError or RecursionError later.
    (b'{"cmd":"restarted","pid":1e999}', "out of range"),
    (b'{"cmd":"exited","code":Infinity,"restarting":false}', "Infinity is not a number here"),
    (b'{"cmd":"exited","code":NaN,"restarting":false}', "NaN is not a number here"),
    (b'{"cmd":"restarted","pid":5.5}', "pid is not an integer"),
    (b'{"cmd":"restarted","pid":true}', "pid is not an integer"),
    (b'{"cmd":"restarted","pid":99999999999999999999}', "pid is not an integer in [1, 4194304]"),
    (b'{"cmd":"restarted","pid":0}', "pid is not an integer in [1, 4194304]"),
    (b'{"cmd":"exited","code":1,"restarting":false,"signalled":-3}', "signalled is not an integer"),
    (b'{"cmd":"beat","x":' + b"[" * 30_000 + b"]" * 30_000 + b"}", "nested too deep"),
    (b'{"cmd":"beat","x":' + b"[" * 9 + b"]" * 9 + b"}", "nested deeper than 8"),
])
def test_bad_requests_raise_one_line(line: bytes, said: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode_request(line)
    assert said in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("line, said", [
    (b'{"event":"explode"}', "unknown event 'explode'"),
    (b'{"message":"hello"}', "reply: KeyError('ok')"),
    (b'{"ok":true,"interval_s":"soon"}', "reply: ValueError"),
    (b"null", "not a JSON object"),
])
def test_bad_replies_raise_one_line(line: bytes, said: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode_reply(line)
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_a_line_longer_than_the_bound_is_refused_before_parsing() -> None:
    long = json.dumps({"cmd": "beat", "heartbeats": [{"x": "y" * MAX_LINE_BYTES}]}).encode()
    with pytest.raises(ProtocolError, match=f"at most {MAX_LINE_BYTES}"):
        decode_request(long)
    with pytest.raises(ProtocolError, match="bytes"):
        decode_reply(long)


@pytest.mark.parametrize("chunks, lines, pending", [
    ([b"a\nb\n"], [b"a", b"b"], b""),
    ([b"a", b"b\nc"], [b"ab"], b"c"),
    ([b"\n\n\n"], [b"", b"", b""], b""),
    ([b"x" * 10, b"\n"], [b"x" * 10], b""),
    ([b"", b"a\n"], [b"a"], b""),
])
def test_the_framer_splits_lines_across_chunks(chunks: list[bytes], lines: list[bytes], pending: bytes) -> None:
    framer = LineFramer(max_bytes=10)
    got = [line for chunk in chunks for line in framer.feed(chunk)]
    assert got == lines and framer.pending == pending


@pytest.mark.parametrize("chunks", [[b"x" * 11], [b"x" * 6, b"x" * 5], [b"x" * 11 + b"\n"], [b"a\n" + b"y" * 12]])
def test_the_framer_refuses_a_line_over_its_bound(chunks: list[bytes]) -> None:
    framer = LineFramer(max_bytes=10)
    with pytest.raises(ProtocolError, match="a line over 10 bytes"):
        for chunk in chunks:
            framer.feed(chunk)


def test_the_framer_is_linear_in_blank_lines() -> None:
    """32768 blank lines in one 64 KiB chunk: each byte searched once (the old split recopied the rest per line);
    counted in searches, not timed."""
    framer = LineFramer()
    assert len(framer.feed(b"\n" * 65536)) == 65536 and framer.pending == b""


@pytest.mark.parametrize("text, refused", [
    ("train-1", None),
    ("naïve 日本", None),
    ("", None),
    ("a\x1b]0;x\x07", "holds '\\x1b'"),
    ("\ud800", "holds '\\ud800'"),
    ("tab\there", "holds '\\t'"),
    ("\u202e", "holds '\\u202e'"),  # a bidi override: a format character, not printable
    ("x" * 65, "65 characters (at most 64)"),
])
def test_text_refusal(text: str, refused: str | None) -> None:
    why = text_refusal(text, 64)
    assert (why is None) if refused is None else (why is not None and refused in why)
