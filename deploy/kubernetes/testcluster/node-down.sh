#!/usr/bin/env bash
# node-down.sh DIR NAME: take the node NAME node-up.sh (or start.sh with NODES) added out of the test
# cluster in DIR: its Node object deleted, its kubelet, containers and containerd stopped by their
# PIDs, its bridge and cgroups removed. Its folder is left for its logs.
set -uo pipefail

[ $# -eq 2 ] || { echo "usage: $0 DIR NAME" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="$(realpath -m "$1")"
NAME="$2"
source "$HERE/node-lib.sh"
[ "$NAME" != localhost ] || { say "localhost is the cluster's first node: stop.sh DIR stops the cluster"; exit 2; }
[ -f "$DIR/cluster.env" ] || { say "no test cluster in $DIR"; exit 1; }
source "$DIR/cluster.env"
node_down "$NAME"
"$BIN/kubectl" --kubeconfig "$DIR/pki/admin.kubeconfig" delete node "$NAME" --ignore-not-found >/dev/null
exit 0
