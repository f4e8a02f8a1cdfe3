"""The Raspberry Pi playbook and installer, checked without Pis and without Docker.

* ``ansible-playbook --syntax-check`` accepts the playbook with the example inventory, which
  ``ansible-inventory`` reads as 8 Pis, pi-0 being the broker, the coordinator and a node;
* the playbook's templates, rendered with jinja2 against that inventory, put on each Pi only its
  own keys and install every role secure; ``insecure=true`` (and only that) turns it off;
* the playbook's first play, run for real on this machine, makes the cluster's keys with
  ``gossip keys init`` once and keeps them on the next run; the whole playbook, run by Ansible
  in check mode with every Pi being this machine, stages each Pi's own keys and nothing else;
* install.sh refuses to install a role with neither ``--keys`` nor ``--insecure``.

The secure install itself, in a Debian container, is ``test_deploy_pi.py`` (Docker).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PI = ROOT / "deploy" / "raspberry-pi"
PLAYBOOK = PI / "ansible" / "playbook.yml"
INVENTORY = PI / "ansible" / "inventory.example.ini"
# What the controller's play leaves for the Pis' plays (paths.yml finds them): the wheel in
# dist/pi, the keys next to the inventory.
WHEEL = "/home/me/gossip/dist/pi/continuized_gossip-0.1.0-py3-none-any.whl"
KEYS = "/home/me/gossip/keys"


def _ansible(tool: str) -> str:
    """The path of an Ansible command: on PATH, or next to this Python (the dev extras)."""
    found = shutil.which(tool) or shutil.which(tool, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{tool} is missing: pip install -e '.[dev]' (it brings ansible-core)")
    return found


def _ansible_env() -> dict[str, str]:
    # Plain output to parse, and no .retry files left next to the playbook.
    return {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0"}


@pytest.fixture(scope="module")
def inventory() -> dict[str, Any]:
    """The example inventory as Ansible reads it (``ansible-inventory --list``)."""
    done = subprocess.run(
        [_ansible("ansible-inventory"), "-i", str(INVENTORY), "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_ansible_env(),
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _groups(inventory: dict[str, Any]) -> dict[str, list[str]]:
    return {
        name: list(inventory[name].get("hosts", [])) for name in ("broker", "coordinator", "nodes")
    }


def test_the_playbook_passes_the_syntax_check() -> None:
    done = subprocess.run(
        [_ansible("ansible-playbook"), "--syntax-check", "-i", str(INVENTORY), str(PLAYBOOK)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_ansible_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_example_inventory_is_eight_pis_with_pi0_doing_everything(
    inventory: dict[str, Any],
) -> None:
    groups = _groups(inventory)
    assert groups["broker"] == ["pi-0"]
    assert groups["coordinator"] == ["pi-0"]
    assert groups["nodes"] == [f"pi-{k}" for k in range(8)]
    hostvars = inventory["_meta"]["hostvars"]
    assert hostvars["pi-3"]["gossip_graph"] == "cycle:8"
    assert hostvars["pi-0"]["coordinator_host"] == hostvars["pi-0"]["ansible_host"]
    # Secure unless the user says otherwise.
    assert str(hostvars["pi-5"]["insecure"]).lower() == "false"


# -- rendering the playbook's templates ---------------------------------------------------------


def _to_bool(value: object) -> bool:
    """Ansible's ``bool`` filter: yes/true/on/1 (any case) are true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"yes", "true", "on", "1", "y"}


def _environment() -> Any:
    import jinja2
    from jinja2.nativetypes import NativeEnvironment

    env = NativeEnvironment(undefined=jinja2.StrictUndefined)
    env.filters["bool"] = _to_bool
    env.filters["basename"] = os.path.basename
    env.filters["dirname"] = os.path.dirname
    return env


def _render(env: Any, value: Any, context: dict[str, Any]) -> Any:
    """Render a playbook value (a string, list or dict of templates) as Ansible would."""
    if isinstance(value, str):
        if "{{" not in value:
            return value
        return env.from_string(value.strip()).render(context)
    if isinstance(value, list):
        return [_render(env, v, context) for v in value]
    if isinstance(value, dict):
        return {k: _render(env, v, context) for k, v in value.items()}
    return value


def _fileglob(plugin: str, pattern: str) -> list[str]:
    """The controller's ``query('ansible.builtin.fileglob', ...)``: the wheel it has built."""
    assert plugin == "ansible.builtin.fileglob", plugin
    assert pattern.endswith("/dist/pi/*.whl"), pattern
    return [WHEEL]


def _host_tasks(
    inventory: dict[str, Any], play_name: str, host: str, extra: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The tasks of one play for one host, rendered: task name -> its module arguments, or
    ``None`` for a task its ``when`` skips."""
    env = _environment()
    plays = yaml.safe_load(PLAYBOOK.read_text())
    play = next(p for p in plays if p["name"] == play_name)
    context: dict[str, Any] = {
        **inventory["_meta"]["hostvars"][host],
        **extra,
        "inventory_hostname": host,
        "groups": _groups(inventory),
        "playbook_dir": str(PLAYBOOK.parent),
        "ansible_inventory_sources": [str(Path(KEYS).parent / "inventory.ini")],
        "query": _fileglob,
    }
    variables: dict[str, Any] = {}
    for name in play.get("vars_files", []):
        variables.update(yaml.safe_load((PLAYBOOK.parent / name).read_text()))
    variables.update(play.get("vars", {}))
    for name, value in variables.items():  # in order: later ones use earlier ones
        context[name] = _render(env, value, context)
    out: dict[str, Any] = {}
    for task in play["tasks"]:
        when = task.get("when")
        if when is not None and not env.compile_expression(when)(**context):
            out[task["name"]] = None
            continue
        module = next(k for k in task if k.startswith("ansible."))
        if "loop" in task:  # one rendering per item
            items = _render(env, task["loop"], context)
            out[task["name"]] = [_render(env, task[module], {**context, "item": i}) for i in items]
        else:
            out[task["name"]] = _render(env, task[module], context)
    return out


def _argv(tasks: dict[str, Any], prefix: str) -> list[str]:
    task = next(args for name, args in tasks.items() if name.startswith(prefix))
    argv = task["argv"]
    # A list of strings, as the command module's argv takes it (not one string).
    assert isinstance(argv, list), argv
    assert all(isinstance(a, str) for a in argv), argv
    return [str(a) for a in argv]


def _option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} not in {argv}"
    return argv[argv.index(name) + 1]


def test_secure_by_default_each_pi_gets_only_its_own_keys(inventory: dict[str, Any]) -> None:
    broker = _host_tasks(inventory, "Broker", "pi-0", {})
    staged = broker["Stage the broker's passwd and ACL (root only, until install.sh takes them)"]
    assert staged["src"] == f"{KEYS}/mqtt/"
    assert staged["mode"] == "0600"
    assert staged["directory_mode"] == "0700"
    argv = _argv(broker, "Install")
    assert argv[1] == "broker"
    assert _option(argv, "--keys") == "/root/gossip-keys/mqtt"
    assert "--insecure" not in argv

    coordinator = _host_tasks(inventory, "Coordinator", "pi-0", {})
    staged = coordinator["Stage the coordinator's keys (root only, until install.sh takes them)"]
    assert staged["src"] == f"{KEYS}/coordinator/"
    argv = _argv(coordinator, "Install")
    assert _option(argv, "--keys") == "/root/gossip-keys/coordinator"
    assert _option(argv, "--graph") == "cycle:8"
    assert _option(argv, "--rate") == "100"
    assert _option(argv, "--broker") == "192.168.1.10"
    assert _option(argv, "--source") == "/opt/gossip-src/" + os.path.basename(WHEEL)
    assert "--insecure" not in argv
    assert "--mqtt-password" not in argv
    assert "--ntp-serve" in argv

    for k in range(8):
        host = f"pi-{k}"
        node = _host_tasks(inventory, "Nodes", host, {})
        staged = node["Stage this node's own keys (root only, until install.sh takes them)"]
        # node-K on the K-th host, and nothing else: not the coordinator's, not a neighbour's.
        assert staged["src"] == f"{KEYS}/node-{k}/", host
        assert staged["mode"] == "0600"
        argv = _argv(node, "Install")
        assert _option(argv, "--keys") == "/root/gossip-keys/node"
        assert _option(argv, "--coordinator") == "192.168.1.10"
        assert "--insecure" not in argv
        assert "--name" not in argv
        # pi-0 serves time to the others: its node install must not repoint chrony at itself.
        assert ("--no-chrony" in argv) == (host == "pi-0"), argv
        assert node["Remove the staged copy"]["state"] == "absent"


def test_the_pis_get_files_not_directories_from_the_checkout(inventory: dict[str, Any]) -> None:
    # keys/ may sit next to an inventory kept in deploy/raspberry-pi/ansible/: a directory copy
    # of deploy/raspberry-pi would hand every Pi every key.
    plays = yaml.safe_load(PLAYBOOK.read_text())
    play = next(p for p in plays if p["name"] == "Copy the installer and the wheel to every Pi")
    copies = [t for t in play["tasks"] if "ansible.builtin.copy" in t]
    for task in copies:
        src = task["ansible.builtin.copy"]["src"]
        assert not src.rstrip("}").rstrip().endswith(("raspberry-pi", "/")), src
    task = next(t for t in copies if "loop" in t)
    for item in task["loop"]:
        assert (PI / item).is_file(), item
    # Everything install.sh reads next to itself is in the list.
    script = (PI / "install.sh").read_text()
    for needed in ("mosquitto.conf", "gossip-mosquitto.service"):
        assert needed in script
        assert needed in task["loop"]
    assert "gossip-$role.service" in script


def test_a_host_can_choose_its_key(inventory: dict[str, Any]) -> None:
    node = _host_tasks(inventory, "Nodes", "pi-2", {"gossip_key": "node-6"})
    staged = node["Stage this node's own keys (root only, until install.sh takes them)"]
    assert staged["src"] == f"{KEYS}/node-6/"


def test_a_given_wheel_and_key_directory_win(inventory: dict[str, Any]) -> None:
    extra = {"gossip_wheel": "/srv/wheels/mine.whl", "gossip_keys_dir": "/srv/keys"}
    copy = _host_tasks(inventory, "Copy the installer and the wheel to every Pi", "pi-1", extra)
    installer = copy["Copy install.sh, the units and mosquitto.conf"]
    assert installer[0]["src"].endswith("/deploy/raspberry-pi/install.sh")
    assert installer[0]["mode"] == "0755"
    assert copy["Copy the wheel"] == {
        "src": "/srv/wheels/mine.whl",
        "dest": "/opt/gossip-src/mine.whl",
        "mode": "0644",
    }
    node = _host_tasks(inventory, "Nodes", "pi-1", extra)
    assert _option(_argv(node, "Install"), "--source") == "/opt/gossip-src/mine.whl"
    staged = node["Stage this node's own keys (root only, until install.sh takes them)"]
    assert staged["src"] == "/srv/keys/node-1/"


@pytest.mark.parametrize("flag", ["true", "yes", True])
def test_insecure_only_when_asked(inventory: dict[str, Any], flag: object) -> None:
    extra = {"insecure": flag}
    broker = _host_tasks(inventory, "Broker", "pi-0", extra)
    assert (
        broker["Stage the broker's passwd and ACL (root only, until install.sh takes them)"] is None
    )
    assert "--insecure" in _argv(broker, "Install")
    assert "--keys" not in _argv(broker, "Install")
    coordinator = _host_tasks(inventory, "Coordinator", "pi-0", {**extra, "mqtt_password": "pw"})
    argv = _argv(coordinator, "Install")
    assert "--insecure" in argv
    assert "--keys" not in argv
    assert _option(argv, "--mqtt-password") == "pw"
    node = _host_tasks(inventory, "Nodes", "pi-4", extra)
    assert node["Stage this node's own keys (root only, until install.sh takes them)"] is None
    argv = _argv(node, "Install")
    assert "--insecure" in argv
    assert "--keys" not in argv
    assert _option(argv, "--name") == "pi-4"


def test_no_placeholder_for_the_repository() -> None:
    # The playbook copies a wheel of the local checkout; nothing asks for a git URL.
    for path in (PLAYBOOK, PI / "README.md", PI / "install.sh"):
        text = path.read_text()
        assert "<this repository>" not in text, path
        assert "git clone" not in text, path


# -- the controller's play, for real -----------------------------------------------------------


def _controller_play(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run the playbook limited to this machine (its first play) with the example inventory
    copied into tmp_path; `gossip` is this checkout's CLI."""
    inventory = tmp_path / "inventory.ini"
    # --limit matches only hosts of the inventory, not Ansible's implicit localhost: name it.
    local = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    inventory.write_text(local + INVENTORY.read_text())
    cli = tmp_path / "gossip"
    cli.write_text(f'#!/bin/sh\nexec {sys.executable} -m continuized.cli.app "$@"\n')
    cli.chmod(0o755)
    env = {**_ansible_env(), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [_ansible("ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "--limit", "localhost",
         "-e", f"gossip_cli={cli}", "-e", f"gossip_wheel={WHEEL}", *extra],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.timeout(600)
def test_the_controller_play_makes_the_keys_once(tmp_path: Path) -> None:
    done = _controller_play(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    keys = tmp_path / "keys"
    assert sorted(p.name for p in keys.iterdir()) == sorted(
        ["coordinator", "mqtt", *(f"node-{k}" for k in range(8))]
    )
    node = keys / "node-3"
    assert stat.S_IMODE(node.stat().st_mode) == 0o700
    assert stat.S_IMODE((node / "secret.key").stat().st_mode) == 0o600
    assert "user node-7" in (keys / "mqtt" / "acl").read_text()
    assert "user node-8" not in (keys / "mqtt" / "acl").read_text()
    secret = (node / "secret.key").read_text()

    # A second run keeps them: the Pis already hold these keys.
    again = _controller_play(tmp_path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert (node / "secret.key").read_text() == secret
    assert "changed=0" in again.stdout.split("PLAY RECAP")[-1]


@pytest.mark.timeout(300)
def test_the_controller_play_makes_no_keys_when_insecure(tmp_path: Path) -> None:
    done = _controller_play(tmp_path, "-e", "insecure=true")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert not (tmp_path / "keys").exists()


# -- install.sh's refusal --------------------------------------------------------------------------


def _install_sh(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run install.sh with a fake `id` that says "not root": had a check let the install
    through, the script would stop at its root check (exit 1) rather than touch this machine."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "id").write_text("#!/bin/sh\necho 1000\n")
    (fake / "id").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(PI / "install.sh"), *argv], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize(
    ("argv", "needs"),
    [
        (["node", "--coordinator", "192.168.1.10"], "DIR/node-K"),
        (["coordinator", "--graph", "cycle:8"], "DIR/coordinator"),
        (["broker"], "DIR/mqtt"),
    ],
)
def test_install_sh_refuses_without_keys_or_insecure(
    tmp_path: Path, argv: list[str], needs: str
) -> None:
    done = _install_sh(tmp_path, *argv)
    assert done.returncode == 2, done.stderr
    assert needs in done.stderr
    assert "--keys" in done.stderr
    assert "--insecure" in done.stderr
    # Both at once make no sense either.
    done = _install_sh(tmp_path, *argv, "--keys", str(tmp_path), "--insecure")
    assert done.returncode == 2, done.stderr
    assert "contradict" in done.stderr


def test_install_sh_names_the_missing_key_file(tmp_path: Path) -> None:
    keys = tmp_path / "node-3"
    keys.mkdir()
    (keys / "identity.json").write_text("{}")
    done = _install_sh(tmp_path, "node", "--coordinator", "h", "--keys", str(keys))
    assert done.returncode == 2, done.stderr
    assert "no secret.key" in done.stderr
    # A password of its own makes no sense with keys: every role's is derived from them.
    done = _install_sh(tmp_path, "broker", "--keys", str(keys), "--mqtt-password", "pw")
    assert done.returncode == 2, done.stderr
    assert "--mqtt-password is for --insecure" in done.stderr


# -- every play, for real, in check mode -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_whole_playbook_in_check_mode_gives_each_pi_its_own_keys(tmp_path: Path) -> None:
    # Every Pi of the example inventory is this machine (connection local), and --check makes
    # Ansible skip the commands (install.sh never runs) and write no file: this is Ansible's
    # own templating of every task, against the example inventory, with real keys.
    inventory = tmp_path / "inventory.ini"
    text = INVENTORY.read_text()
    for k in range(8):
        text = text.replace(f"ansible_host=192.168.1.1{k}", "ansible_connection=local")
    inventory.write_text(f"localhost ansible_connection=local\n{text}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "continuized.cli.app", "keys", "init",
         "--dir", str(tmp_path / "keys"), "--nodes", "8"],
        check=True, capture_output=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip
    wheel = tmp_path / "continuized_gossip-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    done = subprocess.run(
        [_ansible("ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "--check", "-v",
         "-e", "ansible_become=false", "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"gossip_wheel={wheel}"],
        capture_output=True, text=True, timeout=500, cwd=tmp_path, env=_ansible_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # -v prints each host's result as one JSON line under its task's header.
    staged: dict[str, list[str]] = {}
    commands: dict[str, list[list[str]]] = {}
    task = ""
    for line in done.stdout.splitlines():
        header = re.match(r"TASK \[(.*)\] \*+$", line)
        result = re.match(r"(?:ok|changed|skipping): \[([^\]]+)\] => (\{.*\})$", line)
        if header:
            task = header.group(1)
        elif result and task.startswith("Stage"):
            staged.setdefault(result.group(1), []).append(json.loads(result.group(2))["src"])
        elif result and task.startswith("Install"):
            commands.setdefault(result.group(1), []).append(json.loads(result.group(2))["cmd"])
    # pi-0: the broker's, the coordinator's and node-0's; pi-K: node-K alone.
    assert staged["pi-0"] == [f"{tmp_path}/keys/{d}/" for d in ("mqtt", "coordinator", "node-0")]
    for k in range(1, 8):
        assert staged[f"pi-{k}"] == [f"{tmp_path}/keys/node-{k}/"]
        (command,) = commands[f"pi-{k}"]
        assert command[1] == "node"
        assert _option(command, "--keys") == "/root/gossip-keys/node"
        assert "--insecure" not in command
    roles = [c[1] for c in commands["pi-0"]]
    assert roles == ["broker", "coordinator", "node"]
    # Nothing was installed on this machine.
    assert not Path("/opt/gossip-src").exists()
