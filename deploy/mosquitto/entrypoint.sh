#!/bin/sh
# Start mosquitto with password authentication and an ACL, both written here at start from the
# environment, so no password hash is committed:
#   MQTT_USERNAME (default gossip) / MQTT_PASSWORD (required): reads and writes gossip/#;
#   MQTT_VIEWER_USERNAME (default viewer) / MQTT_VIEWER_PASSWORD (optional): reads gossip/# only.
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
# Started as root, mosquitto drops to its own user, which must still read both files.
if id mosquitto >/dev/null 2>&1; then
  chown -R mosquitto /tmp/mosquitto
fi
exec mosquitto -c /mosquitto/config/mosquitto.conf
