"""The direct task transport's frame codec (client wire.py), without sockets: frames split over
any chunks or joined in one come out whole and in order; a bad length or type is an error that
names it."""
from __future__ import annotations

import random

import pytest

from ember._private.transport.wire import BATCH, HELLO, REPLIES, FrameDecoder, FrameError, encode
from ember_common.proto import common_pb2, core_worker_pb2

MAX = 1 << 20


def _frames() -> list[tuple[int, bytes]]:
    batch = core_worker_pb2.TaskBatch(specs=[common_pb2.TaskSpec(task_id=bytes([i]) * 16, name=f"f{i}")
                                             for i in range(3)])
    replies = core_worker_pb2.TaskReplyBatch(replies=[core_worker_pb2.TaskStreamReply(task_id=b"t" * 16)])
    return [(HELLO, b"s" * 32), (BATCH, batch.SerializeToString()), (REPLIES, replies.SerializeToString()),
            (BATCH, b""), (REPLIES, b"x" * 70_000)]


def test_joined_frames_come_out_whole_and_in_order():
    frames = _frames()
    assert FrameDecoder(MAX).feed(b"".join(encode(k, p) for k, p in frames)) == frames


def test_frames_split_at_every_byte_come_out_whole():
    frames = _frames()[:4]
    data = b"".join(encode(k, p) for k, p in frames)
    dec = FrameDecoder(MAX)
    got = []
    for i in range(len(data)):
        got += dec.feed(data[i:i + 1])
    assert got == frames


def test_random_chunks_give_the_same_frames():
    rng = random.Random(20261202)
    frames = _frames()
    data = b"".join(encode(k, p) for k, p in frames) * 3
    for _ in range(50):
        dec, got, pos = FrameDecoder(MAX), [], 0
        while pos < len(data):
            step = rng.randint(1, 9000)
            got += dec.feed(data[pos:pos + step])
            pos += step
        assert got == frames * 3


def test_a_frame_and_a_half_keeps_the_half():
    one, two = encode(BATCH, b"abc"), encode(REPLIES, b"defgh")
    dec = FrameDecoder(MAX)
    assert dec.feed(one + two[:4]) == [(BATCH, b"abc")]
    assert dec.feed(two[4:]) == [(REPLIES, b"defgh")]
    assert dec.feed(b"") == []


@pytest.mark.parametrize("data, text", [
    (b"\x00\x00\x00\x00\x02", "frame length 0 out of range"),
    (b"\x7f\xff\xff\xff\x02", "frame length 2147483647 out of range"),
    (encode(9, b"abc"), "unknown frame type 9"),
    (encode(0, b""), "unknown frame type 0"),
])
def test_a_bad_length_or_type_is_an_error_naming_it(data, text):
    with pytest.raises(FrameError, match=text):
        FrameDecoder(MAX).feed(data)


def test_a_frame_over_the_limit_is_refused_before_its_payload_arrives():
    with pytest.raises(FrameError, match="out of range"):
        FrameDecoder(100).feed(encode(BATCH, b"x" * 101)[:5])
    assert FrameDecoder(100).feed(encode(BATCH, b"x" * 100)) == [(BATCH, b"x" * 100)]


def test_a_first_frame_longer_than_its_cap_is_refused_from_its_header():
    dec = FrameDecoder(MAX, first_max_bytes=32)  # the worker's side: the secret's size
    with pytest.raises(FrameError, match="out of range"):
        dec.feed(encode(HELLO, b"s" * 33)[:5])  # the header alone: nothing of the payload buffered


def test_the_first_frame_cap_lifts_after_the_first_frame_even_in_the_same_chunk():
    dec = FrameDecoder(MAX, first_max_bytes=32)
    assert dec.capping_first
    frames = [(HELLO, b"s" * 32), (REPLIES, b"x" * 70_000)]
    assert dec.feed(b"".join(encode(k, p) for k, p in frames)) == frames
    assert not dec.capping_first
