"""Wire frames: round trips, and every kind of bad frame rejected with the field named."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ProtocolError
from continuized.gossip.wire.schema import (
    MAX_DIM,
    MAX_FRAME,
    MAX_RAW_DIM,
    VERSION,
    Beat,
    BeatBatch,
    Bootstrap,
    BootstrapBatch,
    Busy,
    Leave,
    LedgerReply,
    LedgerRequest,
    Message,
    Moved,
    Nack,
    Neighbor,
    Register,
    RegisterBatch,
    RegisterError,
    Reply,
    Request,
    Stop,
    decode,
    encode,
)

BOOT = Bootstrap(
    node_id=3,
    cluster="gossip",
    algorithm="arg",
    eta=0.0025,
    c=6.75,
    theta=0.0025,
    epoch=1_700_000_000.25,
    rate=2000.0,
    neighbors=(Neighbor(2, "tcp://127.0.0.1:4000", 2, 1 / 29), Neighbor(4, "tcp://h:1", 3, 0.5)),
    initial_value=(0.0,),
    broker="mqtt://127.0.0.1:1883",
    metrics_period=0.5,
    dim=1,
)

EXAMPLES: list[Message] = [
    Request(src=1, edge=0, seq=7, ack=6, t=2.5, u=(1.0, -2.0)),
    Reply(src=0, edge=0, seq=7, t=2.75, dx=(0.25,), dz=(-1.5,)),
    Busy(src=0, edge=0, seq=8, t=3.5),
    Nack(src=0, edge=4, seq=9, reason="stopping"),
    LedgerRequest(src=5, edge=2),
    LedgerReply(src=2, edge=2, seq=4, t=10.0, fx=(0.1,), fz=(0.2,)),
    Register(name="n1", address="tcp://127.0.0.1:5000", value=(21.5,), pid=1234),
    Register(name="n2", address="tcp://127.0.0.1:5001", value=None, pid=1),
    Register(name="n3", address="tcp://127.0.0.1:5002", value=None, pid=1, ready=False),
    BOOT,
    RegisterError(reason="name already taken"),
    Moved(src=5, edge=2, address="tcp://10.0.0.9:7002"),
    Leave(name="node-7"),
    Beat(name="node-3", epoch=1_700_000_000.5, final=""),
    Beat(name="node-3", epoch=1_700_000_000.5, final='{"node": 3, "final": true}'),
    Beat(name="node-3", epoch=1_700_000_000.5, final="", final_over_mqtt=True),
    Stop(epoch=1_700_000_000.5, reason="broker-lost"),
    Request(src=1, edge=0, seq=8, ack=7, t=2.5, u=(1.0, -2.0), z=(0.5, 0.25)),  # movable
    RegisterBatch(
        nodes=(
            Register(name="node-0", address="tcp://127.0.0.1:5000", value=(1.5,), pid=7),
            Register(name="node-1", address="tcp://127.0.0.1:5001", value=None, pid=7),
        )
    ),
    RegisterBatch(
        nodes=(
            Register("node-0", "tcp://127.0.0.1:5000", None, 7, ready=False),
            Register("node-1", "tcp://127.0.0.1:5001", None, 7, ready=False),
        )
    ),
    BootstrapBatch(
        names=("node-3", "node-4"), bootstraps=(BOOT, dataclasses.replace(BOOT, node_id=4))
    ),
    BeatBatch(beats=(Beat("node-3", 1_700_000_000.5, ""), Beat("node-4", 1_700_000_000.5, "{}"))),
    BeatBatch(beats=(Beat("node-3", 1.5, "", final_over_mqtt=True), Beat("node-4", 1.5, "{}"))),
]


def raw(body: dict[str, Any]) -> bytes:
    return msgpack.packb(body, use_bin_type=True)  # type: ignore[no-any-return]


def body_of(message: Message) -> dict[str, Any]:
    out = msgpack.unpackb(encode(message), raw=False)
    assert isinstance(out, dict)
    return out


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message: Message) -> None:
    assert decode(encode(message)) == message


def test_frame_carries_version_and_type() -> None:
    body = body_of(EXAMPLES[0])
    assert body["v"] == VERSION == 6
    assert body["type"] == "request"


finite = st.floats(allow_nan=False, allow_infinity=False)


@given(
    st.integers(0, 2**63 - 1),
    finite,
    st.lists(finite, min_size=1, max_size=8),
)
def test_request_round_trip_any_values(seq: int, t: float, xs: list[float]) -> None:
    msg = Request(src=0, edge=1, seq=seq, ack=0, t=t, u=tuple(xs))
    assert decode(encode(msg)) == msg


def test_ints_are_accepted_as_floats() -> None:
    body = body_of(EXAMPLES[1])
    body["t"] = 3
    body["dx"] = [1]
    msg = decode(raw(body))
    assert isinstance(msg, Reply)
    assert isinstance(msg.t, float)
    assert msg.t == 3.0
    assert msg.dx == (1.0,)


@pytest.mark.parametrize(
    ("frame", "needle"),
    [
        (b"\xc1", "not valid msgpack"),
        (b"", "not valid msgpack"),
        (raw([1, 2]), "must be a msgpack map"),  # type: ignore[arg-type]
        (b"\x00" * (MAX_FRAME + 1), "exceeds the limit"),
    ],
)
def test_garbage_is_rejected(frame: bytes, needle: str) -> None:
    with pytest.raises(ProtocolError, match=needle):
        decode(frame)


def test_wrong_version_is_rejected() -> None:
    body = body_of(EXAMPLES[0])
    # Before exact jumps; before movable ones; before crossing requests; before withdrawn ones
    # (a node of version 4 may serve a request its sender withdrew); before stamped replies
    # (version 5: no clock to bound an offset with): refused, not misread.
    for old in (1, 2, 3, 4, 5):
        body["v"] = old
        with pytest.raises(ProtocolError, match=rf"'v' must be 6.*got {old}"):
            decode(raw(body))
    del body["v"]
    with pytest.raises(ProtocolError, match="'v'"):
        decode(raw(body))


def test_unknown_type_is_rejected() -> None:
    body = body_of(EXAMPLES[0])
    body["type"] = "hello"
    with pytest.raises(ProtocolError, match=r"'type' must be one of .*request.*got 'hello'"):
        decode(raw(body))


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("t", math.nan, "'t' must be finite"),
        ("t", math.inf, "'t' must be finite"),
        ("t", "1.0", "'t' must be a number"),
        ("u", [1.0, math.nan], r"'u'\[1\] must be finite"),
        ("u", [-math.inf, 0.0], r"'u'\[0\] must be finite"),
        ("u", [], "'u' must be a list of 1"),
        ("u", 1.0, "'u' must be a list"),
        ("u", ["a", 1.0], r"'u'\[0\] must be a number"),
        ("seq", -1, "'seq' must be an integer >= 0"),
        ("seq", 1.5, "'seq' must be an integer"),
        ("edge", True, "'edge' must be an integer"),
        ("src", None, "'src' must be an integer"),
    ],
)
def test_bad_request_fields_are_named(field: str, value: Any, needle: str) -> None:
    body = body_of(EXAMPLES[0])
    body[field] = value
    with pytest.raises(ProtocolError, match=needle):
        decode(raw(body))


def test_a_busy_answer_is_validated() -> None:
    body = body_of(Busy(src=0, edge=0, seq=8, t=3.5))
    body["t"] = math.inf
    with pytest.raises(ProtocolError, match="'t' must be finite"):
        decode(raw(body))
    del body["t"]
    with pytest.raises(ProtocolError, match=r"missing field.*'t'"):
        decode(raw(body))


def test_missing_and_extra_fields_are_named() -> None:
    body = body_of(EXAMPLES[0])
    del body["seq"]
    with pytest.raises(ProtocolError, match=r"missing field.*'seq'"):
        decode(raw(body))
    body = body_of(EXAMPLES[0])
    body["evil"] = 1
    with pytest.raises(ProtocolError, match=r"unexpected field.*'evil'"):
        decode(raw(body))


def test_bootstrap_is_validated() -> None:
    body = body_of(BOOT)
    body["neighbors"][1][3] = 0.0
    with pytest.raises(ProtocolError, match=r"neighbors\[1\]\.prob.*\(0, 1\]"):
        decode(raw(body))
    body = body_of(BOOT)
    body["neighbors"][0] = [1, "tcp://x:1"]
    with pytest.raises(ProtocolError, match=r"neighbors\[0\]"):
        decode(raw(body))
    body = body_of(BOOT)
    body["rate"] = 0.0
    with pytest.raises(ProtocolError, match="'rate' must be > 0"):
        decode(raw(body))
    body = body_of(BOOT)
    body["dim"] = 2
    with pytest.raises(ProtocolError, match="'initial_value' has 1 components but 'dim' is 2"):
        decode(raw(body))
    body = body_of(BOOT)
    body["epoch"] = math.nan
    with pytest.raises(ProtocolError, match="'epoch' must be finite"):
        decode(raw(body))


def test_register_value_may_be_null_but_not_garbage() -> None:
    body = body_of(EXAMPLES[6])
    body["value"] = [math.inf]
    with pytest.raises(ProtocolError, match=r"'value'\[0\] must be finite"):
        decode(raw(body))
    body["value"] = "21.5"
    with pytest.raises(ProtocolError, match="'value' must be a list"):
        decode(raw(body))


@given(st.binary(max_size=64))
def test_random_bytes_never_escape_as_other_errors(frame: bytes) -> None:
    # Anything but a ProtocolError (or a valid message) escaping here fails the test.
    with contextlib.suppress(ProtocolError):
        decode(frame)


@pytest.mark.parametrize(
    ("algorithm", "problem"), [("rg", "quadratic"), ("cd", "quadratic"), ("acd", ""), ("", "")]
)
def test_a_bootstrap_whose_algorithm_does_not_go_with_its_problem_is_refused(
    algorithm: str, problem: str
) -> None:
    frame = encode(dataclasses.replace(BOOT, algorithm=algorithm, problem=problem, n=4))
    with pytest.raises(ProtocolError, match="field 'algorithm'"):
        decode(frame)


def test_a_bootstrap_of_a_live_optimization_runs_acd() -> None:
    boot = dataclasses.replace(BOOT, algorithm="acd", problem="quadratic", n=4)
    assert decode(encode(boot)) == boot


def test_a_bootstrap_batch_names_each_bootstrap_and_checks_each_as_a_lone_one() -> None:
    body = msgpack.unpackb(encode(BootstrapBatch(names=("a", "b"), bootstraps=(BOOT,))))
    with pytest.raises(ProtocolError, match="'bootstraps' has 1 entries but 'names' has 2"):
        decode(msgpack.packb(body))
    body = msgpack.unpackb(encode(BootstrapBatch(names=("a",), bootstraps=(BOOT,))))
    body["bootstraps"][0]["rate"] = 0.0
    with pytest.raises(ProtocolError, match=r"bootstraps\[0\].*'rate'"):
        decode(msgpack.packb(body))


def test_a_register_batch_is_not_empty_and_its_entries_are_checked() -> None:
    with pytest.raises(ProtocolError, match="'nodes' must be a non-empty list"):
        decode(msgpack.packb({"v": VERSION, "type": "register_batch", "nodes": []}))
    bad = {"v": VERSION, "type": "register_batch", "nodes": [["n", "tcp://h:1", None, -1]]}
    with pytest.raises(ProtocolError, match=r"nodes\[0\]\.pid"):
        decode(msgpack.packb(bad))


# A training node's Bootstrap: the model spec and seeds, no model (the node draws its own).
TRAIN_BOOT = dataclasses.replace(
    BOOT,
    algorithm="a2cid2",
    initial_value=(),
    dim=MAX_DIM * 4,  # past what a list of floats may carry
    data="digits",
    split="iid:0",
    n=8,
    train="mlp:256:64",
    rate_com=1.0,
    lr=0.1,
    batch_size=16,
    init="per-node",
)


@pytest.mark.parametrize("init", ["per-node", "common"])
def test_a_training_bootstrap_without_its_model_decodes_alone_and_in_a_batch(init: str) -> None:
    boot = dataclasses.replace(TRAIN_BOOT, init=init)
    assert decode(encode(boot)) == boot
    assert body_of(boot)["initial_value"] == []
    batch = BootstrapBatch(names=("node-3",), bootstraps=(boot,))
    assert decode(encode(batch)) == batch


def test_a_bootstrap_without_init_is_the_frame_earlier_peers_send_and_read() -> None:
    # Left out where it has its default: a gossip Bootstrap's frame has not changed, and a
    # frame without it (an earlier coordinator's) decodes, training or not.
    assert "init" not in body_of(BOOT)
    assert "init" not in body_of(BootstrapBatch(names=("a",), bootstraps=(BOOT,)))["bootstraps"][0]
    earlier = dataclasses.replace(TRAIN_BOOT, initial_value=(0.5, -0.25), dim=2, init="")
    body = body_of(earlier)
    assert "init" not in body
    assert decode(raw(body)) == earlier


def test_a_beat_says_its_final_went_over_mqtt_only_in_a_field_older_peers_leave_out() -> None:
    plain = Beat("node-3", 1_700_000_000.5, "")
    flagged = dataclasses.replace(plain, final_over_mqtt=True)
    # Left out while false: a beat's frame, alone or in a batch, is the one older peers send.
    assert body_of(plain) == {
        "v": VERSION,
        "type": "beat",
        "name": "node-3",
        "epoch": 1_700_000_000.5,
        "final": "",
    }
    assert body_of(BeatBatch((plain,)))["beats"] == [["node-3", 1_700_000_000.5, ""]]
    # An older node's beat (no field) decodes with the flag false.
    older = {"v": VERSION, "type": "beat", "name": "node-3", "epoch": 1.0, "final": "{}"}
    assert decode(raw(older)) == Beat("node-3", 1.0, "{}", final_over_mqtt=False)
    older_batch = {"v": VERSION, "type": "beat_batch", "beats": [["node-3", 1.0, ""]]}
    assert decode(raw(older_batch)) == BeatBatch((Beat("node-3", 1.0, ""),))
    # Set, it goes on the wire and comes back, alone and in a batch.
    assert body_of(flagged)["final_over_mqtt"] is True
    assert body_of(BeatBatch((flagged,)))["beats"] == [["node-3", 1_700_000_000.5, "", True]]
    assert decode(encode(flagged)) == flagged
    assert decode(encode(BeatBatch((plain, flagged)))) == BeatBatch((plain, flagged))


@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_a_beat_whose_flag_is_no_bool_is_refused_with_the_field_named(bad: Any) -> None:
    body = {
        "v": VERSION,
        "type": "beat",
        "name": "n",
        "epoch": 1.0,
        "final": "",
        "final_over_mqtt": bad,
    }
    with pytest.raises(ProtocolError, match="'final_over_mqtt' must be true or false"):
        decode(raw(body))
    batch = {"v": VERSION, "type": "beat_batch", "beats": [["n", 1.0, "", bad]]}
    with pytest.raises(ProtocolError, match=r"'beats\[0\].final_over_mqtt' must be true or false"):
        decode(raw(batch))
    batch["beats"] = [["n", 1.0, "", True, "extra"]]
    with pytest.raises(ProtocolError, match=r"'beats\[0\]' must be \[name, epoch, final\] or"):
        decode(raw(batch))


def test_a_bootstrap_without_its_values_is_refused_unless_it_trains() -> None:
    body = body_of(BOOT)
    body["initial_value"] = []
    with pytest.raises(ProtocolError, match=r"'initial_value' is empty.*'dim' = 1"):
        decode(raw(body))
    body = body_of(TRAIN_BOOT)
    body["train"] = ""
    body["algorithm"] = "arg"
    with pytest.raises(ProtocolError, match="'init' is 'per-node' but 'train' is empty"):
        decode(raw(body))
    del body["init"]
    with pytest.raises(ProtocolError, match="'initial_value' is empty"):
        decode(raw(body))


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("init", "", r"'init' must be one of common, per-node.*got ''"),
        ("init", "random", r"'init' must be one of common, per-node.*got 'random'"),
        ("dim", 0, rf"'dim' must be 1 to {MAX_RAW_DIM} .*got 0"),
        ("dim", MAX_RAW_DIM + 1, rf"'dim' must be 1 to {MAX_RAW_DIM} .*got {MAX_RAW_DIM + 1}"),
        ("initial_value", [0.5], "'initial_value' has 1 components but 'dim' is 65536"),
    ],
)
def test_a_training_bootstrap_without_its_model_names_its_bad_field(
    field: str, value: Any, error: str
) -> None:
    body = body_of(TRAIN_BOOT)
    body[field] = value
    if field == "init" and not value:
        del body["init"]  # as an earlier coordinator would leave it out
    with pytest.raises(ProtocolError, match=error):
        decode(raw(body))


def test_a_ready_registration_is_the_frame_an_older_node_sends() -> None:
    """``ready`` goes on the wire only when false: an older coordinator reads a ready node's
    registration, alone or in a batch, and an older node's reads as ready."""
    lone = Register("n1", "tcp://127.0.0.1:5000", None, 3)
    assert "ready" not in body_of(lone)
    assert body_of(dataclasses.replace(lone, ready=False))["ready"] is False
    batch = body_of(RegisterBatch((lone, dataclasses.replace(lone, name="n2", ready=False))))
    assert [len(item) for item in batch["nodes"]] == [4, 5]
    older = raw(
        {
            "v": VERSION,
            "type": "register",
            "name": "n1",
            "address": lone.address,
            "value": None,
            "pid": 3,
        }
    )
    assert decode(older) == lone


def test_a_draft_bootstrap_is_one_without_an_epoch() -> None:
    assert not BOOT.draft
    draft = dataclasses.replace(BOOT, epoch=Bootstrap.DRAFT_EPOCH)
    assert draft.draft
    assert decode(encode(draft)) == draft
