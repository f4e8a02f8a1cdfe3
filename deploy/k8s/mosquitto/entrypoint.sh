#!/bin/sh
# Start mosquitto with password authentication and an ACL, both written here at start from the
# environment, so no password hash is committed:
#   MQTT_USERNAME (default gossip) / MQTT_PASSWORD (required): reads and writes gossip/#;
#   MQTT_VIEWER_USERNAME (default viewer) / MQTT_VIEWER_PASSWORD (optional): reads gossip/# only;
#   MQTT_NODE_AUTH (optional): a directory with the `passwd` and `acl` of `gossip keys init`
#     (the compose file's keys volume): one account per node, node-<id>, allowed to publish only
#     its own state. It is waited for (its `ready` file, up to 5 minutes), unless
#     GOSSIP_INSECURE=1.
# Works in eclipse-mosquitto and in any Debian image with mosquitto and mosquitto-clients.
set -eu
: "${MQTT_USERNAME:=gossip}"
: "${MQTT_PASSWORD:?MQTT_PASSWORD must be set (the broker refuses anonymous clients)}"
viewer=${MQTT_VIEWER_USERNAME:-viewer}
mkdir -p /tmp/mosquitto
umask 077
mosquitto_passwd -b -c /tmp/mosquitto/passwd "$MQTT_USERNAME" "$MQTT_PASSWORD"
cat >/tmp/mosquitto/acl <<ACL
user $MQTT_USERNAME
topic readwrite gossip/#
topic read \$SYS/#
ACL
if [ -n "${MQTT_VIEWER_PASSWORD:-}" ]; then
  mosquitto_passwd -b /tmp/mosquitto/passwd "$viewer" "$MQTT_VIEWER_PASSWORD"
  printf 'user %s\ntopic read gossip/#\n' "$viewer" >>/tmp/mosquitto/acl
fi
case "${GOSSIP_INSECURE:-0}" in 1 | true | yes) MQTT_NODE_AUTH= ;; esac
if [ -n "${MQTT_NODE_AUTH:-}" ]; then
  tries=0
  until [ -e "$MQTT_NODE_AUTH/ready" ] || [ "$tries" -ge 300 ]; do
    [ "$tries" -eq 0 ] && echo "waiting for the node accounts ($MQTT_NODE_AUTH/ready)" >&2
    tries=$((tries + 1))
    sleep 1
  done
  if [ ! -e "$MQTT_NODE_AUTH/ready" ]; then
    echo "no node accounts in $MQTT_NODE_AUTH after 5 minutes: is the keys service running?" >&2
    exit 1
  fi
  cat "$MQTT_NODE_AUTH/passwd" >>/tmp/mosquitto/passwd
  cat "$MQTT_NODE_AUTH/acl" >>/tmp/mosquitto/acl
fi
# Started as root, mosquitto drops to its own user, which must still read both files.
if id mosquitto >/dev/null 2>&1; then
  chown -R mosquitto /tmp/mosquitto
fi
exec mosquitto -c /mosquitto/config/mosquitto.conf
