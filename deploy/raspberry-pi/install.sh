#!/usr/bin/env bash
# Install one role of a continuized-gossip cluster on a Raspberry Pi (Raspberry Pi OS or Debian
# bookworm, arm64 or amd64), as root, from a copy of the project (a checkout or a wheel).
# Secure by default: each role needs its own directory of `gossip keys init --dir keys/`:
#
#   sudo deploy/raspberry-pi/install.sh broker      --keys keys/mqtt
#   sudo deploy/raspberry-pi/install.sh coordinator --keys keys/coordinator --graph cycle:8 \
#                                                   --broker 192.168.1.10 --ntp-serve
#   sudo deploy/raspberry-pi/install.sh node        --keys keys/node-3 --coordinator 192.168.1.10
#
# What it does, idempotently: installs Debian's python3-venv and chrony (and mosquitto for the
# broker); creates the system user `gossip`; installs the project into the virtual environment
# /opt/gossip (runtime dependencies of deploy/requirements.txt, those of --extras, then the
# project itself); copies
# the role's keys to /etc/gossip/keys/<role> (0700, secrets 0600, owned by gossip) or, for the
# broker, the password file and ACL to /etc/gossip/mosquitto/ (owned by mosquitto, 0600); writes
# /etc/gossip/<role>.env from the options; points chrony at the time server; installs the
# systemd unit, enables it and restarts it (so that new keys or settings take effect).
# Options (all roles):
#   --keys DIR           the role's keys: DIR/node-K for a node, DIR/coordinator for the
#                        coordinator, DIR/mqtt (passwd and acl) for the broker
#   --insecure           no keys: plain ZeroMQ sockets and an anonymous broker (or one shared
#                        --mqtt-password); anyone on the LAN can join or alter a run. Only
#                        when asked for: without --keys or --insecure the script refuses.
#   --source PATH        project checkout or wheel to install (default: this checkout)
#   --pip-flags "..."    extra pip flags, e.g. "--no-index --find-links /media/usb/wheels"
#   --reinstall          reinstall the project even if this source is already installed (by
#                        default a second role on the same Pi reuses the environment)
#   --extras LIST        extras of the project to add to the lean install (the core and the
#                        dashboard), comma-separated: optimization runs (--problem) need
#                        `sim,data` on the coordinator and on every node; without them the
#                        coordinator stops at once, naming the extra
#   --ntp-server HOST    chrony server to follow (default for a node: the coordinator's host)
#   --ntp-serve          serve time to the LAN (the coordinator's Pi, for a LAN with no Internet)
#   --no-chrony          leave chrony's configuration alone (a node on the coordinator's Pi)
#   --no-apt             do not install Debian packages (they are already there)
#   --no-systemctl       install the units but do not call systemctl (images, containers, tests)
#   --prefix DIR         virtual environment (default /opt/gossip); --etc DIR (default /etc/gossip)
# node:        --coordinator HOST[:PORT] (required), --advertise HOST (default: this Pi's address
#              on the route to the coordinator), --port PORT (default 7000), --name NAME
#              (insecure only, default: the hostname; with --keys the node is named after its
#              key), --data SPEC (optimization runs: data on this Pi replacing the
#              coordinator's data spec)
# coordinator: --graph SPEC, --expect N, --algorithm arg|rg|acd, --rate R, --values SPEC,
#              --until EPS, --broker HOST[:PORT], --dashboard-port PORT (default 8080),
#              --dashboard-token TOKEN, --problem SPEC (optimize: logistic:0.01, ridge:0.1, ...),
#              --data SPEC (default breast-cancer), --split SPEC (default iid:0),
#              --mqtt-password PW (insecure only: the broker's shared account)
# broker:      --mqtt-viewer-password PW (optional read-only account `viewer`),
#              --mqtt-password PW (insecure only: one shared account `gossip` instead of none)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
role=${1:-}
case "$role" in
  node|coordinator|broker) shift ;;
  *) echo "usage: install.sh node|coordinator|broker [options] (got '${role}'; see the header)" >&2
     exit 2 ;;
esac

source_path=$(cd "$here/../.." && pwd)
pip_flags=""
ntp_server=""
ntp_serve=0
use_apt=1
use_systemctl=1
reinstall=0
extras=""
prefix=/opt/gossip
etc=/etc/gossip
coordinator=""
advertise=""
port=7000
name=""
graph=grid:4x4
expect=""
algorithm=""  # the task's default: arg, or acd with --problem
rate=200
values=onehot
until=1e-6
broker=""
dashboard_port=8080
dashboard_token=""
problem=""
data=""
split=iid:0
mqtt_password=""
mqtt_viewer_password=""
keys=""
insecure=0
use_chrony=1

need() { [ $# -ge 2 ] || { echo "install.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --source) need "$@"; source_path=$2; shift 2 ;;
    --pip-flags) need "$@"; pip_flags=$2; shift 2 ;;
    --reinstall) reinstall=1; shift ;;
    --extras) need "$@"; extras=$2; shift 2 ;;
    --ntp-server) need "$@"; ntp_server=$2; shift 2 ;;
    --ntp-serve) ntp_serve=1; shift ;;
    --no-chrony) use_chrony=0; shift ;;
    --keys) need "$@"; keys=$2; shift 2 ;;
    --insecure) insecure=1; shift ;;
    --no-apt) use_apt=0; shift ;;
    --no-systemctl) use_systemctl=0; shift ;;
    --prefix) need "$@"; prefix=$2; shift 2 ;;
    --etc) need "$@"; etc=$2; shift 2 ;;
    --coordinator) need "$@"; coordinator=$2; shift 2 ;;
    --advertise) need "$@"; advertise=$2; shift 2 ;;
    --port) need "$@"; port=$2; shift 2 ;;
    --name) need "$@"; name=$2; shift 2 ;;
    --graph) need "$@"; graph=$2; shift 2 ;;
    --expect) need "$@"; expect=$2; shift 2 ;;
    --algorithm) need "$@"; algorithm=$2; shift 2 ;;
    --rate) need "$@"; rate=$2; shift 2 ;;
    --values) need "$@"; values=$2; shift 2 ;;
    --until) need "$@"; until=$2; shift 2 ;;
    --broker) need "$@"; broker=$2; shift 2 ;;
    --dashboard-port) need "$@"; dashboard_port=$2; shift 2 ;;
    --dashboard-token) need "$@"; dashboard_token=$2; shift 2 ;;
    --problem) need "$@"; problem=$2; shift 2 ;;
    --data) need "$@"; data=$2; shift 2 ;;
    --split) need "$@"; split=$2; shift 2 ;;
    --mqtt-password) need "$@"; mqtt_password=$2; shift 2 ;;
    --mqtt-viewer-password) need "$@"; mqtt_viewer_password=$2; shift 2 ;;
    *) echo "install.sh: unknown option '$1' for role $role (see the header of this script)" >&2
       exit 2 ;;
  esac
done

if [ "$role" = node ] && [ -z "$coordinator" ]; then
  echo "install.sh: a node needs --coordinator HOST (the coordinator Pi's address)" >&2
  exit 2
fi
# Secure unless asked otherwise: each role needs its keys, or --insecure said out loud.
if [ -n "$keys" ] && [ "$insecure" -eq 1 ]; then
  echo "install.sh: --keys and --insecure contradict each other: give one of them" >&2
  exit 2
fi
if [ -z "$keys" ] && [ "$insecure" -eq 0 ]; then
  case "$role" in
    node) what="DIR/node-K, this node's own directory" ;;
    coordinator) what="DIR/coordinator" ;;
    broker) what="DIR/mqtt, the broker's passwd and acl" ;;
  esac
  echo "install.sh: $role needs --keys ($what, from \`gossip keys init --dir DIR --nodes N\`);" \
    "or --insecure for an unauthenticated cluster that anyone on the LAN can join" >&2
  exit 2
fi
if [ -n "$keys" ] && [ -n "$mqtt_password" ]; then
  echo "install.sh: --mqtt-password is for --insecure installs; with --keys every role has" \
    "its own MQTT password, derived from the keys" >&2
  exit 2
fi
if [ -n "$keys" ]; then
  case "$role" in
    node) wanted=(identity.json secret.key) ;;
    coordinator) wanted=(identity.json secret.key allow.json mqtt.secret) ;;
    broker) wanted=(passwd acl) ;;
  esac
  for f in "${wanted[@]}"; do
    if [ ! -f "$keys/$f" ]; then
      echo "install.sh: no $f in --keys $keys: the $role needs ${wanted[*]} (a directory" \
        "of \`gossip keys init --dir DIR\`: DIR/node-K, DIR/coordinator or DIR/mqtt)" >&2
      exit 2
    fi
  done
  keys=$(cd "$keys" && pwd)
fi
if [ "$insecure" -eq 1 ]; then
  echo "install.sh [$role]: WARNING: --insecure: no authentication; any machine on the LAN" \
    "can join this cluster, read its exchanges and alter its values" >&2
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (sudo), it installs packages, a user and systemd units" >&2
  exit 1
fi

say() { echo "install.sh [$role]: $*"; }

# -- Debian packages ---------------------------------------------------------------------------
if [ "$use_apt" -eq 1 ]; then
  packages=(python3-venv chrony)
  [ "$role" = broker ] && packages+=(mosquitto mosquitto-clients)
  say "installing ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

install -d -m 0755 "$etc"

# -- the broker --------------------------------------------------------------------------------
if [ "$role" = broker ]; then
  install -d -m 0750 -o mosquitto "$etc/mosquitto"
  rm -f "$etc/mosquitto/passwd" "$etc/mosquitto/acl"
  if [ -z "$mqtt_password" ] && [ -z "$keys" ]; then
    # --insecure with no password: an anonymous broker, the only kind that needs no accounts.
    sed -e 's/^allow_anonymous false/allow_anonymous true/' -e '/^password_file/d' \
      -e '/^acl_file/d' "$here/mosquitto.conf" >"$etc/mosquitto/mosquitto.conf"
    chmod 0644 "$etc/mosquitto/mosquitto.conf"
  else
    install -m 0644 "$here/mosquitto.conf" "$etc/mosquitto/mosquitto.conf"
    (umask 077
     if [ -n "$keys" ]; then
       # The accounts of `gossip keys init`: coordinator and node-<id>, each with its own
       # password (salted hashes here) and ACL lines (a node publishes only its own state).
       cp "$keys/passwd" "$etc/mosquitto/passwd"
       cp "$keys/acl" "$etc/mosquitto/acl"
     else
       mosquitto_passwd -b -c "$etc/mosquitto/passwd" gossip "$mqtt_password"
       printf 'user gossip\ntopic readwrite gossip/#\ntopic read $SYS/#\n' >"$etc/mosquitto/acl"
     fi
     if [ -n "$mqtt_viewer_password" ]; then
       mosquitto_passwd -b "$etc/mosquitto/passwd" viewer "$mqtt_viewer_password"
       printf '\nuser viewer\ntopic read gossip/#\n' >>"$etc/mosquitto/acl"
     fi)
    chown mosquitto "$etc/mosquitto/passwd" "$etc/mosquitto/acl"
    chmod 0600 "$etc/mosquitto/passwd" "$etc/mosquitto/acl"
  fi
  install -m 0644 "$here/gossip-mosquitto.service" /etc/systemd/system/gossip-mosquitto.service
  if [ "$use_systemctl" -eq 1 ]; then
    # Debian's own unit listens on 1883 too.
    systemctl disable --now mosquitto.service >/dev/null 2>&1 || true
    systemctl daemon-reload
    systemctl enable gossip-mosquitto.service
    # A restart, not just a start: a running broker must load the new accounts.
    systemctl restart gossip-mosquitto.service
  fi
  if [ -n "$keys" ]; then accounts="accounts from $keys/passwd"
  elif [ -n "$mqtt_password" ]; then accounts="user gossip"
  else accounts="anonymous, insecure"
  fi
  say "broker installed: mqtt://$(hostname -I 2>/dev/null | cut -d' ' -f1):1883 ($accounts)"
  exit 0
fi

# -- the project, in a virtual environment ------------------------------------------------------
getent group gossip >/dev/null || groupadd --system gossip
id gossip >/dev/null 2>&1 || useradd --system --gid gossip --home-dir /var/lib/gossip \
  --no-create-home --shell /usr/sbin/nologin gossip
if [ ! -x "$prefix/bin/python" ]; then
  say "creating the virtual environment $prefix"
  python3 -m venv "$prefix"
fi
# The source's fingerprint: a wheel's checksum, or a checkout's files (caches aside), and the
# extras. A second role on the same Pi (a node beside the coordinator) finds it in the
# environment and skips pip: on a Pi, rebuilding and reinstalling the project takes minutes.
fingerprint() {
  {
    if [ -f "$1" ]; then
      sha256sum "$1"
    else
      (cd "$1" && find pyproject.toml continuized gossip node coordinator cli deploy/requirements.txt \
         -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 2>/dev/null \
         | sort -z | xargs -0 sha256sum)
    fi
    echo "extras: $extras"
  } | sha256sum | cut -d' ' -f1
}
stamp="$prefix/.gossip-source"
source_fp=$(fingerprint "$source_path")
if [ "$reinstall" -eq 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$source_fp" ] \
   && "$prefix/bin/gossip" --help >/dev/null 2>&1; then
  say "continuized-gossip from $source_path is already in $prefix (--reinstall to redo it)"
else
  say "installing continuized-gossip from $source_path"
  rm -f "$stamp"
  # shellcheck disable=SC2086  # pip_flags is a list of flags
  "$prefix/bin/pip" install -q --disable-pip-version-check $pip_flags \
    -r "$here/../requirements.txt"
  if [ -n "$extras" ]; then
    # Their requirements only (the project's `[extras]` would pull the whole core, amqtt too),
    # from the checkout's pyproject.toml or the wheel's metadata.
    declared=$source_path
    [ -d "$source_path" ] && declared=$source_path/pyproject.toml
    python3 "$here/../extras_requirements.py" "$declared" "$extras" >"$prefix/.gossip-extras.txt"
    # shellcheck disable=SC2086
    "$prefix/bin/pip" install -q --disable-pip-version-check $pip_flags \
      -r "$prefix/.gossip-extras.txt"
  fi
  # shellcheck disable=SC2086
  "$prefix/bin/pip" install -q --disable-pip-version-check $pip_flags --no-deps \
    --force-reinstall "$source_path"
  "$prefix/bin/gossip" --help >/dev/null
  echo "$source_fp" >"$stamp"
fi

# -- keys ----------------------------------------------------------------------------------------
# Only this role's directory, readable by the service user alone: the node and the coordinator
# refuse a secret file that the group or others can read.
key_dir="$etc/keys/$role"
rm -rf "$key_dir"
if [ -n "$keys" ]; then
  install -d -m 0755 "$etc/keys"
  install -d -m 0700 -o gossip -g gossip "$key_dir"
  for f in "$keys"/*; do
    [ -f "$f" ] || continue
    case "$(basename "$f")" in
      secret.key | mqtt.secret) mode=0600 ;;
      *) mode=0644 ;;
    esac
    install -m "$mode" -o gossip -g gossip "$f" "$key_dir/"
  done
  # Load them as the service will, as its user: a bad key fails the install, not the boot.
  key_name=$(runuser -u gossip -- "$prefix/bin/python" -c \
    'import sys, pathlib; from continuized.gossip.files.keys import load_identity
print(load_identity(pathlib.Path(sys.argv[1])).name)' "$key_dir")
  if [ "$role" = coordinator ]; then
    runuser -u gossip -- "$prefix/bin/python" -c \
      'import sys, pathlib; from continuized.coordinator.membership.security import load_security
load_security(pathlib.Path(sys.argv[1]))' "$key_dir"
  fi
  say "keys of $key_name in $key_dir"
fi

# -- settings ------------------------------------------------------------------------------------
host_of() { local h=${1#*://}; echo "${h%%:*}"; }
env_file="$etc/$role.env"
if [ "$role" = node ]; then
  coord_host=$(host_of "$coordinator")
  case "$coordinator" in
    tcp://*) coord_url=$coordinator ;;
    *:*) coord_url="tcp://$coordinator" ;;
    *) coord_url="tcp://$coordinator:5555" ;;
  esac
  if [ -z "$advertise" ]; then
    # The source address of the route to the coordinator is the one the other Pis can reach.
    if command -v ip >/dev/null; then
      coord_ip=$(getent ahostsv4 "$coord_host" | awk 'NR==1{print $1}' || true)
      advertise=$(ip -4 route get "${coord_ip:-$coord_host}" 2>/dev/null \
        | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}' || true)
    fi
    [ -n "$advertise" ] || advertise=$(hostname -I | cut -d' ' -f1)
  fi
  [ -n "$ntp_server" ] || ntp_server=$coord_host
  {
    echo "# gossip node settings (install.sh); each GOSSIP_X is the option --x of \`gossip node\`."
    echo "GOSSIP_COORDINATOR=$coord_url"
    if [ -n "$keys" ]; then
      # The node registers under its key's name; the coordinator refuses any other.
      echo "GOSSIP_KEYS=$key_dir"
    else
      echo "GOSSIP_NAME=${name:-$(hostname)}"
    fi
    echo "GOSSIP_BIND=tcp://0.0.0.0:$port"
    echo "GOSSIP_ADVERTISE=$advertise"
  } >"$env_file"
  [ -n "$data" ] && echo "GOSSIP_DATA=$data" >>"$env_file"
else
  [ -n "$broker" ] || broker=127.0.0.1
  case "$broker" in
    mqtt://*) broker_url=$broker ;;
    *:*) broker_url="mqtt://$broker" ;;
    *) broker_url="mqtt://$broker:1883" ;;
  esac
  if [ -n "$mqtt_password" ]; then
    # Percent-encoded: the password may hold characters a URL cannot (the clients decode it).
    encoded=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' \
      "$mqtt_password")
    broker_url="mqtt://gossip:$encoded@${broker_url#mqtt://}"
  fi
  {
    echo "# gossip coordinator settings (install.sh); each GOSSIP_X is the option --x of"
    echo "# \`gossip coordinator\`. Change them and \`systemctl start gossip-coordinator\`."
    echo "GOSSIP_GRAPH=$graph"
    [ -n "$expect" ] && echo "GOSSIP_EXPECT=$expect"
    [ -n "$algorithm" ] && echo "GOSSIP_ALGORITHM=$algorithm"
    echo "GOSSIP_RATE=$rate"
    echo "GOSSIP_VALUES=$values"
    echo "GOSSIP_UNTIL=$until"
    if [ -n "$problem" ]; then
      echo "GOSSIP_PROBLEM=$problem"
      echo "GOSSIP_DATA=${data:-breast-cancer}"
      echo "GOSSIP_SPLIT=$split"
    fi
    # With keys the URL has no password: the coordinator derives its own from the MQTT secret
    # and hands each node its own in the bootstrap.
    echo "GOSSIP_BROKER=$broker_url"
    [ -n "$keys" ] && echo "GOSSIP_KEYS=$key_dir"
    echo "GOSSIP_BIND=tcp://0.0.0.0:5555"
    # Pis come up one by one: wait for the last one for up to an hour.
    echo "GOSSIP_REGISTER_TIMEOUT=3600"
    echo "GOSSIP_DASHBOARD_PORT=$dashboard_port"
    echo "GOSSIP_DASHBOARD_HOST=0.0.0.0"
    [ -n "$dashboard_token" ] && echo "GOSSIP_DASHBOARD_TOKEN=$dashboard_token"
  } >"$env_file"
fi
chmod 0640 "$env_file"
chgrp gossip "$env_file"
say "wrote $env_file"

# -- clock synchronisation ---------------------------------------------------------------------
if [ "$use_chrony" -eq 1 ] && [ -d /etc/chrony ]; then
  install -d /etc/chrony/conf.d
  {
    echo "# continuized-gossip (install.sh): t = rate * (now - epoch) needs synchronised clocks."
    [ -n "$ntp_server" ] && echo "server $ntp_server iburst minpoll 2 maxpoll 4"
    # Step the clock at start if it is off by more than 0.1 s, slew afterwards.
    echo "makestep 0.1 3"
    if [ "$ntp_serve" -eq 1 ]; then
      echo "allow"
      echo "local stratum 8"
    fi
  } >/etc/chrony/conf.d/gossip.conf
fi

# -- the unit ----------------------------------------------------------------------------------
install -m 0644 "$here/gossip-$role.service" "/etc/systemd/system/gossip-$role.service"
if [ "$use_systemctl" -eq 1 ]; then
  [ "$use_chrony" -eq 1 ] && { systemctl restart chrony.service 2>/dev/null || true; }
  # time-sync.target then waits until chrony has synchronised the clock.
  systemctl enable chrony-wait.service 2>/dev/null || true
  systemctl daemon-reload
  systemctl enable "gossip-$role.service"
  # A restart, not just a start: a running service must pick up new keys and settings.
  systemctl restart "gossip-$role.service"
fi
say "installed gossip-$role.service"
