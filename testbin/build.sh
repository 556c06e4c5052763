#!/usr/bin/env bash
# Builds the control-plane binaries kubeapp's tests run against (kube-apiserver and etcd, and for
# testenv's cluster mode kube-controller-manager, kube-scheduler and kwok) from the Go wrapper
# modules in cli/testbin/ (inside the kubeapp-cli crate, which embeds them for
# `kubeapp testenv install`: a published crate may only carry its own files), into a cache
# outside the checkout keyed by version.
#
#   testbin/build.sh            build what is missing, then print the directory holding kube-apiserver and etcd
#
# - When KUBEBUILDER_ASSETS is set and already holds kube-apiserver and etcd, those are not built
#   and that directory is printed (envtest users keep their binaries); the cluster mode's binaries
#   it lacks are built into the cache (testenv looks for each binary in both).
# - Otherwise the cache is ${KUBEAPP_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/kubeapp}/k8s-<ver>-etcd-<ver>;
#   a binary already there is not built again, so a second run takes well under a second.
# - Cold build times on a 2-core machine: docs/cluster-mode.md.
# - Only the directory goes to stdout; progress goes to stderr, so callers may write
#   `export KUBEBUILDER_ASSETS=$(testbin/build.sh)`.
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
# kwok's version is pinned by cli/testbin/kwok/go.mod; this line documents it (and a test checks both).
KWOK_VERSION=v0.8.0

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
modules=$(cd "$here/../cli/testbin" && pwd)
log() { printf 'testbin: %s\n' "$*" >&2; }

cluster_bins=(kube-controller-manager kube-scheduler kwok)
assets=""
if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    assets=$KUBEBUILDER_ASSETS
    all=1
    for b in "${cluster_bins[@]}"; do [ -x "$assets/$b" ] || all=0; done
    if [ "$all" = 1 ]; then
      printf '%s\n' "$assets"
      exit 0
    fi
    log "it lacks the cluster mode's binaries; building those into the cache (testenv looks in both)"
  else
    log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks kube-apiserver or etcd; building into the cache instead"
  fi
fi

command -v go >/dev/null 2>&1 || { log "go is not on PATH: install Go >= 1.26 (e.g. apt-get install golang-go, or from go.dev)"; exit 1; }

cache_root=${KUBEAPP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeapp}
bin="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
mkdir -p "$bin"

# One build at a time per cache directory: parallel CI steps or test binaries may call this at once.
exec 9>"$bin/.lock"
flock 9

minor=${K8S_VERSION#v1.}; minor=${minor%%.*}

# A binary's stamp: a hash of its module's go.mod and go.sum, written beside it as .<name>.stamp.
# The cache directory is keyed by the Kubernetes and etcd versions only; the stamp catches a
# changed module under one key (kwok's version, a bumped dependency). A binary cached before stamps
# existed is taken as current and stamped.
stamp_of() { cat "$modules/$1/go.mod" "$modules/$1/go.sum" | sha256sum | cut -c1-16; }

build_one() { # name module-dir package ldflags
  local name=$1 dir=$2 pkg=$3 ldflags=$4
  local stamp
  stamp=$(stamp_of "$dir")
  if [ -x "$bin/$name" ]; then
    if [ ! -f "$bin/.$name.stamp" ]; then
      printf '%s\n' "$stamp" >"$bin/.$name.stamp"
    fi
    if [ "$(cat "$bin/.$name.stamp")" = "$stamp" ]; then
      log "$name is cached in $bin"
      return
    fi
    log "$name in $bin was built from another cli/testbin/$dir/go.mod or go.sum: building it again"
  fi
  log "building $name from cli/testbin/$dir (cold builds take minutes)"
  local start=$SECONDS
  (cd "$modules/$dir" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath \
      -tags selinux,notest,grpcnotrace -ldflags "-s -w $ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  printf '%s\n' "$stamp" >"$bin/.$name.stamp"
  log "built $name in $((SECONDS - start)) s ($(du -h "$bin/$name" | cut -f1))"
}

ver_flags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ver_flags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
done

if [ -z "$assets" ]; then
  build_one etcd etcd go.etcd.io/etcd/server/v3 ""
  build_one kube-apiserver apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ver_flags"
fi
# The cluster mode's parts (testenv's `cluster()`, `kubeapp run`): the controllers and the
# scheduler from the same Kubernetes module as kube-apiserver, and kwok (fake nodes and pods)
# from its own module (it is built against other k8s.io versions).
build_one kube-controller-manager apiserver k8s.io/kubernetes/cmd/kube-controller-manager "$ver_flags"
build_one kube-scheduler apiserver k8s.io/kubernetes/cmd/kube-scheduler "$ver_flags"
build_one kwok kwok sigs.k8s.io/kwok/cmd/kwok ""

printf '%s\n' "${assets:-$bin}"
