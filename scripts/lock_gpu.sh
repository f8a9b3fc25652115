#!/usr/bin/env bash
# Resolve requirements/gpu.in into requirements/gpu.txt, the complete lock of a GPU host
# (Linux x86_64, CPython 3.11, CUDA wheels from PyPI), on any machine: no GPU is needed and
# nothing is installed. pip resolves for the target platform from wheels only; the few
# dependencies published only as source (pycosat, cellpylib, zss) are built here first so
# that their metadata can be read. The machine's own wheel folder (PIP_FIND_LINKS, which
# holds torch+cpu) is left out, so torch resolves to PyPI's CUDA build.
#
#   scripts/lock_gpu.sh                        # rewrites requirements/gpu.txt, CPython 3.11
#   PYTHON_VERSION=3.12 scripts/lock_gpu.sh    # for a host (or base image) on Python 3.12
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
version=${PYTHON_VERSION:-3.11}
abi=cp${version/./}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for glibc in $(seq 35 -1 17); do platforms+=(--platform "manylinux_2_${glibc}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform linux_x86_64)

resolve() {
  PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null "$python" -m pip install --dry-run --ignore-installed \
    --quiet --report "$work/report.json" --target "$work/target" "${platforms[@]}" \
    --python-version "$version" --implementation cp --abi "$abi" --only-binary=:all: \
    --find-links "$work/wheels" -r requirements/gpu.in 2>"$work/pip.log"
}

for _ in $(seq 10); do
  resolve && break
  # a dependency with no wheel: build one here (its metadata is all the resolution needs)
  needed=$(grep -o "satisfies the requirement [^ ]*" "$work/pip.log" | head -1 | cut -d' ' -f4)
  [ -n "$needed" ] || { grep -v WARNING "$work/pip.log" >&2; exit 1; }
  echo "building $needed (published as source only)" >&2
  "$python" -m pip wheel --no-deps --quiet -w "$work/wheels" "$needed"
done
[ -s "$work/report.json" ] || { echo "no resolution after 10 tries" >&2; exit 1; }

"$python" - "$work/report.json" "$version" > requirements/gpu.txt <<'PY'
import json
import sys

report = json.load(open(sys.argv[1]))
version = sys.argv[2]
pins = sorted(
    (item["metadata"]["name"].lower(), item["metadata"]["version"]) for item in report["install"]
)
print(f"# The complete GPU lock (Linux x86_64, CPython {version}, CUDA wheels from PyPI), written by")
print("# scripts/lock_gpu.sh from requirements/gpu.in; do not edit by hand. Installed by")
print("# scripts/setup.sh where nvidia-smi answers, and by docker/Dockerfile.gpu.")
for name, version in pins:
    print(f"{name}=={version}")
PY
echo "requirements/gpu.txt: $(grep -c '==' requirements/gpu.txt) packages" >&2
