#!/bin/sh
# The image's entrypoint: `gossip "$@"`, with a node name that survives a restart, and the
# secure-by-default wiring of docker-compose.yml.
#
# A restarted node must register under the same name to get its id back. The default name
# (HOSTNAME-PID) is not stable in a container, so the node's name here is, unless GOSSIP_NAME
# is set:
#   * node-<slot> on a Swarm, where the compose file sets GOSSIP_TASK_SLOT to "{{.Task.Slot}}"
#     (a replaced task gets a new container but keeps its slot);
#   * otherwise the container's hostname, which `docker start` / `restart:` keep (plain Compose
#     leaves the Swarm template unexpanded, which is how the two are told apart).
# A node with a key pool (GOSSIP_KEYS_POOL) uses that name to claim its keys, and is then
# named after its key (node/transport/keypool.py).
#
# Keys (docker-compose.yml): GOSSIP_KEYS_WAIT names the file the one-shot `keys` service writes
# last; the coordinator and the nodes wait for it (up to 5 minutes; on a Swarm nothing orders
# the services). GOSSIP_INSECURE=1 drops the keys, loudly. The `keys` command, started as root,
# hands the key volumes to the image's user and runs as that user.
set -eu
case "${GOSSIP_INSECURE:-0}" in
  1 | true | yes)
    echo "*** GOSSIP_INSECURE=1: NO CurveZMQ keys and NO per-node MQTT accounts: any process" \
      "that reaches this network can join the cluster or forge exchanges. Testing only. ***" >&2
    [ "${1:-}" = keys ] && exit 0
    unset GOSSIP_KEYS GOSSIP_KEYS_POOL GOSSIP_KEYS_WAIT
    ;;
esac
if [ "${1:-}" = keys ] && [ "$(id -u)" = 0 ]; then
  for dir in /keys /keys/coordinator /keys/pool /keys/mqtt; do
    [ -d "$dir" ] && chown gossip:gossip "$dir"
  done
  chmod 700 /keys
  [ -d /keys/coordinator ] && chmod 700 /keys/coordinator
  [ -d /keys/pool ] && chmod 700 /keys/pool
  # Password hashes and the ACL only: the broker's own user must read them.
  [ -d /keys/mqtt ] && chmod 755 /keys/mqtt
  exec setpriv --reuid=gossip --regid=gossip --init-groups gossip "$@"
fi
if [ -n "${GOSSIP_KEYS_WAIT:-}" ]; then
  tries=0
  until [ -e "$GOSSIP_KEYS_WAIT" ] || [ "$tries" -ge 300 ]; do
    [ "$tries" -eq 0 ] && echo "waiting for the keys service ($GOSSIP_KEYS_WAIT)" >&2
    tries=$((tries + 1))
    sleep 1
  done
fi
if [ "${1:-}" = node ] && [ -z "${GOSSIP_NAME:-}" ]; then
  case "${GOSSIP_TASK_SLOT:-}" in
    ''|*[!0-9]*) GOSSIP_NAME=$(hostname) ;;
    *) GOSSIP_NAME="node-$GOSSIP_TASK_SLOT" ;;
  esac
  export GOSSIP_NAME
fi
# A node advertises the address of its interface toward the coordinator, found from the
# coordinator's address: wait (up to 5 minutes) until the coordinator's name resolves, which on
# a Swarm is only once its task runs. Without it the node would advertise its bare hostname.
if [ "${1:-}" = node ] && [ -z "${GOSSIP_ADVERTISE:-}" ] && [ -n "${GOSSIP_COORDINATOR:-}" ]; then
  host=${GOSSIP_COORDINATOR#*://}
  host=${host%:*}
  tries=0
  until getent hosts "$host" >/dev/null 2>&1 || [ "$tries" -ge 300 ]; do
    tries=$((tries + 1))
    sleep 1
  done
fi
# A node that binds to the name it advertises (Kubernetes: its stable DNS name, node-K.node,
# deploy/k8s) waits until that name resolves: the cluster's DNS publishes it shortly after the
# pod gets its address, and binding to a name that does not resolve yet would fail.
case "${GOSSIP_BIND:-}" in
  tcp://"${GOSSIP_ADVERTISE:-}":*)
    if [ "${1:-}" = node ] && [ -n "${GOSSIP_ADVERTISE:-}" ]; then
      tries=0
      until getent hosts "$GOSSIP_ADVERTISE" >/dev/null 2>&1 || [ "$tries" -ge 300 ]; do
        [ "$tries" -eq 0 ] && echo "waiting until $GOSSIP_ADVERTISE resolves" >&2
        tries=$((tries + 1))
        sleep 1
      done
    fi
    ;;
esac
exec gossip "$@"
