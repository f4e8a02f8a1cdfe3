#!/bin/sh
# The image's entrypoint: `gossip "$@"`, with a node name that survives a restart.
#
# A restarted node must register under the same name to get its id back. The default name
# (HOSTNAME-PID) is not stable in a container, so the node's name here is, unless GOSSIP_NAME
# is set:
#   * node-<slot> on a Swarm, where the compose file sets GOSSIP_TASK_SLOT to "{{.Task.Slot}}"
#     (a replaced task gets a new container but keeps its slot);
#   * otherwise the container's hostname, which `docker start` / `restart:` keep (plain Compose
#     leaves the Swarm template unexpanded, which is how the two are told apart).
set -eu
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
exec gossip "$@"
