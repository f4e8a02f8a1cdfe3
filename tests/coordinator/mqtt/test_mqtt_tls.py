"""MQTT over TLS (``mqtts://``) against a real mosquitto, with a CA the test makes."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import getpass
import ipaddress
import json
import os
from pathlib import Path

import aiomqtt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from continuized.coordinator.figures.state import BrokerStatus
from continuized.coordinator.local.broker import find_mosquitto
from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port, wait_for_port
from continuized.coordinator.mqtt.auth import write_mosquitto_auth
from continuized.coordinator.mqtt.link import MqttLink
from continuized.gossip.wire.access import COORDINATOR, mqtt_password
from continuized.gossip.wire.pubsub import parse_broker
from continuized.node.mqtt import NodeMqtt

pytestmark = [pytest.mark.broker, pytest.mark.timeout(60)]


def require_mosquitto() -> str:
    """The mosquitto binary; skip without it (CI installs it: fail there)."""
    binary = find_mosquitto()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (scripts/system-deps installs it)")
        pytest.skip("mosquitto is not installed")
    return binary


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca_and_server(directory: Path) -> tuple[Path, Path, Path]:
    """A fresh CA and a server certificate for 127.0.0.1 / localhost signed by it."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gossip test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(_pem(key))
    paths[2].chmod(0o600)
    return paths


async def test_reports_travel_over_tls_with_passwords_and_an_untrusted_ca_is_refused(
    tmp_path: Path,
) -> None:
    ca, cert, key = make_ca_and_server(tmp_path)
    secret = "s" * 32
    passwd, acl = write_mosquitto_auth(tmp_path / "mqtt", secret, 2)
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\ncafile {ca}\ncertfile {cert}\nkeyfile {key}\n"
        f"allow_anonymous false\npassword_file {passwd}\nacl_file {acl}\n"
        f"user {getpass.getuser()}\npersistence false\nlog_dest stderr\n"
    )
    proc = await spawn([require_mosquitto(), "-c", str(conf)], log=tmp_path / "mosquitto.log")
    try:
        await wait_for_port("127.0.0.1", port, 10, proc)
        received: list[tuple[str, bytes]] = []
        arrived = asyncio.Event()

        def on_message(topic: str, payload: bytes) -> None:
            received.append((topic, payload))
            if topic.endswith("/node/1/state"):
                arrived.set()

        link = MqttLink(
            "127.0.0.1",
            port,
            "tls",
            on_message,
            BrokerStatus(),
            username=COORDINATOR,
            password=mqtt_password(secret, COORDINATOR),
            tls=True,
            ca=ca,
        )
        broker = parse_broker(f"mqtts://node-1:{mqtt_password(secret, 'node-1')}@127.0.0.1:{port}")
        assert broker is not None
        assert broker.tls
        with_ca = dataclasses.replace(broker, ca=str(ca))
        node = NodeMqtt(with_ca, "tls", 1, lambda: {"node": 1}, 0.05, lambda: None)
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(link.run()), tg.create_task(node.run())]
            await asyncio.wait_for(arrived.wait(), 20)
            link.stop()
            node.stop()
            for task in tasks:
                task.cancel()
        assert json.loads(received[-1][1]) == {"node": 1}
        # Plain MQTT on the TLS port, or TLS without our CA: no connection.
        for tls in (None, aiomqtt.TLSParameters()):
            with pytest.raises(aiomqtt.MqttError):
                async with aiomqtt.Client(
                    "127.0.0.1",
                    port,
                    username=COORDINATOR,
                    password=mqtt_password(secret, COORDINATOR),
                    tls_params=tls,
                    timeout=5,
                ):
                    pass
    finally:
        await stop_process(proc)
