#!/usr/bin/env bash
# A second Docker engine on this machine that stands in for a remote sandbox host.
#
#   scripts/remote_dockerd.sh start   # idempotent: answers at once when it already runs
#   scripts/remote_dockerd.sh stop
#   scripts/remote_dockerd.sh env     # the ROLLGYM_SANDBOXES__REMOTE__* settings that reach it
#
# The engine has its own unix socket, data root, exec root, pidfile, containerd namespace,
# cgroup parent and bridge, and a TCP listener that speaks TLS only and admits only clients
# with a certificate signed by its own CA (made here with openssl: ca.pem, cert.pem and
# key.pem in $STATE/client, the layout DOCKER_CERT_PATH uses). It leaves the host's
# iptables alone (boxes run with no network). The sandbox image is copied into it from the
# local engine (docker save | load) whenever the local one changed.
#
# The TCP listener is on loopback and, where the local engine has its default bridge, on
# that bridge's gateway too: containers (a Ray node of the cluster tests) reach it there,
# at tcp://<gateway>:$PORT with the same client certificates.
#
# Knobs: ROLLGYM_REMOTE_DOCKER_NAME (default rollgym-remote: names the folders, namespace
# and cgroup), ROLLGYM_REMOTE_DOCKER_PORT (default 23760), ROLLGYM_REMOTE_DOCKER_BRIDGE
# (default rgremote0, at most 15 characters), ROLLGYM_REMOTE_DOCKER_SUBNET (default
# 172.31.250.1/24), ROLLGYM_REMOTE_DOCKER_IMAGES (default rollgym/sandbox-python:latest).
set -euo pipefail

NAME=${ROLLGYM_REMOTE_DOCKER_NAME:-rollgym-remote}
PORT=${ROLLGYM_REMOTE_DOCKER_PORT:-23760}
BRIDGE=${ROLLGYM_REMOTE_DOCKER_BRIDGE:-rgremote0}
SUBNET=${ROLLGYM_REMOTE_DOCKER_SUBNET:-172.31.250.1/24}
IMAGES=${ROLLGYM_REMOTE_DOCKER_IMAGES:-rollgym/sandbox-python:latest}
STATE=/var/lib/$NAME
RUN=/run/$NAME
SOCKET=unix://$RUN/docker.sock

# Where the TCP listener is: loopback, and docker0's gateway when there is one.
ADDRESSES="127.0.0.1 $(ip -4 -o addr show docker0 2>/dev/null | awk '{split($4, a, "/"); print a[1]}')"

log() { printf '[remote-dockerd] %s\n' "$*" >&2; }
die() { printf '[remote-dockerd] error: %s\n' "$*" >&2; exit 1; }
remote() { docker -H "$SOCKET" "$@"; }

# The server certificate names every listening address (IP: entries of subjectAltName).
server_san() {
  local san="DNS:localhost" address
  for address in $ADDRESSES; do san="$san,IP:$address"; done
  echo "subjectAltName=$san"
}

make_certs() {
  local tls=$STATE/tls client=$STATE/client
  if [ -f "$client/key.pem" ]; then
    grep -qxF "$(server_san)" "$tls/server.ext" && return
    make_server_cert  # the listening addresses changed: same CA and client, new server cert
    return
  fi
  mkdir -p "$tls" "$client"
  chmod 700 "$tls" "$client"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$NAME CA" \
    -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" 2>/dev/null
  make_server_cert
  openssl req -newkey rsa:2048 -nodes -subj "/CN=rollgym" \
    -keyout "$client/key.pem" -out "$tls/client.csr" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >"$tls/client.ext"
  openssl x509 -req -days 3650 -in "$tls/client.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" \
    -CAcreateserial -extfile "$tls/client.ext" -out "$client/cert.pem" 2>/dev/null
  cp "$tls/ca.pem" "$client/ca.pem"
  log "certificates in $tls (server) and $client (client)"
}

make_server_cert() {
  local tls=$STATE/tls
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$tls/server-key.pem" -out "$tls/server.csr" 2>/dev/null
  printf '%s\nextendedKeyUsage=serverAuth\n' "$(server_san)" >"$tls/server.ext"
  openssl x509 -req -days 3650 -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" \
    -CAcreateserial -extfile "$tls/server.ext" -out "$tls/server-cert.pem" 2>/dev/null
}

make_bridge() {
  ip link show "$BRIDGE" >/dev/null 2>&1 && return
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

running() { remote version >/dev/null 2>&1; }
# Running on the addresses wanted now (docker0 may have come up after it started).
current() { running && [ "$(cat "$RUN/addresses" 2>/dev/null)" = "$ADDRESSES" ]; }

start() {
  [ "$(id -u)" -eq 0 ] || die "starting a Docker engine needs root"
  if running && ! current; then
    log "restarting $NAME to listen on: $ADDRESSES"
    stop
  fi
  if ! running; then
    make_certs
    make_bridge
    mkdir -p "$STATE/data" "$RUN"
    local hosts=() address
    for address in $ADDRESSES; do hosts+=(-H "tcp://$address:$PORT"); done
    setsid dockerd \
      --data-root "$STATE/data" --exec-root "$RUN/exec" --pidfile "$RUN/docker.pid" \
      -H "$SOCKET" "${hosts[@]}" \
      --tlsverify --tlscacert "$STATE/tls/ca.pem" \
      --tlscert "$STATE/tls/server-cert.pem" --tlskey "$STATE/tls/server-key.pem" \
      --bridge "$BRIDGE" --iptables=false --ip-masq=false \
      --containerd-namespace "$NAME" --containerd-plugins-namespace "$NAME-plugins" \
      --cgroup-parent "/$NAME" \
      </dev/null >"$STATE/dockerd.log" 2>&1 &
    for _ in $(seq 120); do running && break; sleep 0.5; done
    running || die "the engine did not answer within 60 s; see $STATE/dockerd.log"
    echo "$ADDRESSES" >"$RUN/addresses"
    log "engine $NAME up: $SOCKET, tcp://{${ADDRESSES// /,}}:$PORT (TLS, client certificates)"
  fi
  local image want have
  for image in $IMAGES; do
    want=$(docker image inspect --format '{{.Id}}' "$image") || die "no $image here: run scripts/setup.sh"
    have=$(remote image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
    if [ "$want" != "$have" ]; then
      docker save "$image" | remote load -q >/dev/null
      log "copied $image into $NAME"
    fi
  done
}

stop() {
  local pid
  pid=$(cat "$RUN/docker.pid" 2>/dev/null) || { log "not running"; return; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  ip link del "$BRIDGE" 2>/dev/null || true
  log "engine $NAME stopped"
}

env_lines() {
  echo "ROLLGYM_SANDBOXES__BACKEND=remote"
  echo "ROLLGYM_SANDBOXES__REMOTE__URL=tcp://127.0.0.1:$PORT"
  echo "ROLLGYM_SANDBOXES__REMOTE__CERT_DIR=$STATE/client"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  env) env_lines ;;
  *) die "usage: $0 start|stop|env" ;;
esac
