"""The key pool of identical replicas: each process claims key pairs of its own (flock)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.files.keys import init_keys, load_identity
from continuized.node.transport.keypool import claim_keys

CLAIM = (
    "import sys; from pathlib import Path; "
    "from continuized.node.transport.keypool import claim_keys; "
    "lease = claim_keys(Path(sys.argv[1]), sys.argv[2:]); "
    "print(' '.join(k.name for k in lease.keys), flush=True); sys.stdin.read()"
)


def pool_of(tmp_path: Path, n: int) -> Path:
    pool = tmp_path / "pool"
    init_keys(tmp_path, [f"node-{k}" for k in range(n)], zmq.curve_keypair, node_root=pool)
    (pool / "ready").touch()
    return pool


async def claim_in_process(pool: Path, *claimants: str) -> tuple[asyncio.subprocess.Process, str]:
    """A process holding its claims until its stdin closes; return it and what it claimed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLAIM,
        str(pool),
        *claimants,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    return proc, line.decode().strip()


async def test_replicas_starting_together_each_claim_distinct_keys(tmp_path: Path) -> None:
    pool = pool_of(tmp_path, 6)
    started = await asyncio.gather(
        *(claim_in_process(pool, f"c{j}-0", f"c{j}-1") for j in range(3))
    )
    try:
        claimed = [name for _, names in started for name in names.split()]
        assert sorted(claimed) == [f"node-{k}" for k in range(6)]
        with pytest.raises(ConfigError, match="exhausted"):  # a fourth replica: none left
            claim_keys(pool, ["c3"])
    finally:
        for proc, _ in started:
            assert proc.stdin is not None
            proc.stdin.close()
            await proc.wait()
    # Dead owners hold nothing: a new replica gets a key (its previous owner's).
    lease = claim_keys(pool, ["c3"])
    assert len(lease.keys) == 1
    lease.release()


async def test_a_restarted_claimant_gets_its_own_key_back(tmp_path: Path) -> None:
    pool = pool_of(tmp_path, 3)
    proc, first = await claim_in_process(pool, "host-a")
    assert proc.stdin is not None
    proc.stdin.close()  # the container dies...
    await proc.wait()
    other = claim_keys(pool, ["host-b"])  # ...another claims meanwhile: a never-claimed key
    assert other.keys[0].name != first
    again, second = await claim_in_process(pool, "host-a")  # ...and it comes back
    assert second == first
    assert again.stdin is not None
    again.stdin.close()
    await again.wait()
    other.release()


def test_the_claimed_key_loads_and_stays_private(tmp_path: Path) -> None:
    pool = pool_of(tmp_path, 2)
    lease = claim_keys(pool, ["x"])
    identity = load_identity(lease.keys[0])
    assert identity.name == lease.keys[0].name
    assert (lease.keys[0] / "secret.key").stat().st_mode & 0o077 == 0
    assert (lease.keys[0].stat().st_mode & 0o777, pool.stat().st_mode & 0o777) == (0o700, 0o700)
    lease.release()


def test_an_unprovisioned_pool_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not a provisioned key pool.*--pool"):
        claim_keys(tmp_path / "nothing", ["x"])
    pool = pool_of(tmp_path, 1)
    (pool / "ready").unlink()  # the keys service has not finished
    with pytest.raises(ConfigError, match="ready"):
        claim_keys(pool, ["x"])


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 5), want=st.integers(1, 7))
def test_one_process_claims_distinct_keys_or_none(
    tmp_path_factory: pytest.TempPathFactory, n: int, want: int
) -> None:
    pool = pool_of(tmp_path_factory.mktemp("pool"), n)
    names = [f"c-{i}" for i in range(want)]
    if want > n:
        with pytest.raises(ConfigError, match="exhausted"):
            claim_keys(pool, names)
        lease = claim_keys(pool, names[:n])  # a failed claim gave back what it took
    else:
        lease = claim_keys(pool, names)
    assert len({k.name for k in lease.keys}) == len(lease.keys) == min(n, want)
    lease.release()
