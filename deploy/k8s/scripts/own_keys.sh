#!/bin/sh
# Copy a pod's own keys out of a Secret volume into a private directory: the init containers of
# deploy/k8s. The key loader takes only a secret that no group or other user may read, and a
# Secret volume's files belong to root, so a non-root pod reads them only if they are group- or
# world-readable (defaultMode 0444 here, in this init container only, where one user runs). The
# keys the gossip process reads are copies: 0600 in 0700 directories, the pod user's, in a
# memory-backed emptyDir (no fsGroup, which would make them group-readable again).
#
#   own_keys.sh coordinator SRC DEST   every file of SRC (gossip-coordinator-keys) into DEST
#   own_keys.sh node SRC DEST          pod node-P (POD_NAME), running K nodes
#                                      (GOSSIP_NODES_PER_PROCESS, default 1): the key pairs
#                                      node-N of SRC (gossip-node-keys: node-N.identity.json,
#                                      node-N.secret.key) for N = P*K .. P*K+K-1, each into
#                                      DEST/node-N/: a pool of this pod's keys only, which
#                                      `gossip node --keys-pool DEST` claims from
#
# DEST/ready is written last: the gossip container's GOSSIP_KEYS_WAIT names it.
set -eu
usage() {
  echo "usage: own_keys.sh coordinator|node SRC DEST" >&2
  exit 2
}
[ $# -eq 3 ] || usage
role=$1
src=$2
dest=$3
if [ ! -e "$src/ready" ]; then
  echo "no keys in $src (no ready file): has the gossip-keys Job run? kubectl logs job/gossip-keys" >&2
  exit 1
fi
umask 077
case $role in
  coordinator)
    # A Secret volume's files are links into a hidden directory (..data): * skips it.
    for file in "$src"/*; do
      name=${file##*/}
      [ "$name" = ready ] && continue
      cat "$file" >"$dest/$name"
    done
    ;;
  node)
    pod=${POD_NAME:?POD_NAME must be set (the downward API: metadata.name)}
    ordinal=${pod##*-}
    case $ordinal in
      '' | *[!0-9]*)
        echo "POD_NAME=$pod does not end in -<ordinal>: the nodes run as a StatefulSet" >&2
        exit 2
        ;;
    esac
    per=${GOSSIP_NODES_PER_PROCESS:-1}
    case $per in
      '' | *[!0-9]* | 0)
        echo "GOSSIP_NODES_PER_PROCESS must be a whole number >= 1, got '$per'" >&2
        exit 2
        ;;
    esac
    have=0
    for file in "$src"/node-*.identity.json; do
      [ -e "$file" ] && have=$((have + 1))
    done
    i=0
    while [ "$i" -lt "$per" ]; do
      k=$((ordinal * per + i))
      if [ ! -e "$src/node-$k.identity.json" ] || [ ! -e "$src/node-$k.secret.key" ]; then
        echo "pod $pod has no key node-$k: the keys are for $have nodes (the graph's count)," \
          "so run $((have / per)) node pods of $per node(s): set replicas of node in" \
          "deploy/k8s/kustomization.yaml to $((have / per))" >&2
        exit 1
      fi
      mkdir -p "$dest/node-$k"
      cat "$src/node-$k.identity.json" >"$dest/node-$k/identity.json"
      cat "$src/node-$k.secret.key" >"$dest/node-$k/secret.key"
      i=$((i + 1))
    done
    ;;
  *) usage ;;
esac
: >"$dest/ready"
echo "own-keys: $role keys ready in $dest" >&2
