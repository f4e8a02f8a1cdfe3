"""``gossip node`` errors: bad options, a refused registration, no coordinator."""

from __future__ import annotations

import asyncio
import sys

import pytest
import zmq
import zmq.asyncio
from typer.testing import CliRunner

from continuized.cli.app import app
from continuized.gossip.wire.schema import Register, RegisterError, decode, encode


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--value", "abc"], "--value must be a number"),
        (["--fault", "drop=2"], "probability in [0, 1)"),
        (["--log-level", "loud"], "--log-level must be"),
        (["--nodes-per-process", "0"], "--nodes-per-process must be >= 1"),
        (["--nodes-per-process", "2", "--bind", "tcp://127.0.0.1:65535"], "past 65535"),
        (["--leave", "--name", "n1"], "--leave needs --broker"),
        (["--leave", "--name", "n1", "--broker", "http://x"], "broker must be mqtt://"),
    ],
)
def test_bad_options_are_clear_errors(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["node", "--coordinator", "tcp://127.0.0.1:9", *args])
    assert result.exit_code == 2
    assert "error:" in result.output
    assert needle in result.output


def test_a_bad_coordinator_address_is_a_clear_error() -> None:
    result = CliRunner().invoke(app, ["node", "--coordinator", "localhost:5555"])
    assert result.exit_code == 2
    assert "--coordinator must be a zmq address like tcp://host:5555" in result.output


@pytest.mark.parametrize(
    "old",
    [
        ["--exact"],
        ["--no-hold-exchanges"],
        ["--hold-exchanges", "--exact", "--correction-tol", "0", "--correction-horizon", "1"],
    ],
)
def test_retired_fidelity_options_are_accepted_with_one_warning(old: list[str]) -> None:
    """Users' scripts keep working: the options of the retired modes parse, do nothing, and
    say so once (here before the run fails on the bad --value, without any network)."""
    args = ["node", "--coordinator", "tcp://127.0.0.1:9", *old, "--value", "abc"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.output.count("deprecated and have no effect") == 1
    assert "--value must be a number" in result.output


async def run_node(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuized.cli.app", "node", "--host", "127.0.0.1", *args,
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        _, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.mark.cluster
async def test_a_refused_registration_exits_2_with_the_reason() -> None:
    ctx = zmq.asyncio.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        node = asyncio.ensure_future(run_node("--coordinator", f"tcp://127.0.0.1:{port}"))
        route, frame = await asyncio.wait_for(router.recv_multipart(), 60)
        assert isinstance(decode(frame), Register)
        await router.send_multipart([route, encode(RegisterError("expected 4 nodes, have 4"))])
        code, err = await node
    finally:
        router.close(0)
        ctx.term()
    assert code == 2
    assert "the coordinator refused registration: expected 4 nodes, have 4" in err


@pytest.mark.cluster
async def test_no_coordinator_is_a_timeout_error() -> None:
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as probe:
        port = probe.bind_to_random_port("tcp://127.0.0.1")  # free, then closed: nobody there
    code, err = await run_node(
        "--coordinator", f"tcp://127.0.0.1:{port}", "--register-timeout", "1"
    )
    assert code == 2
    assert "no bootstrap from the coordinator" in err
