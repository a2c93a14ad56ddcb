#!/usr/bin/env bash
# stop.sh DIR: stop the test cluster start.sh started in DIR and leave nothing behind on the host:
# every node's pods' containers, kubelet and containerd (each by the PID it recorded), the control
# plane and etcd, the CNI bridges and the nodes' cgroups (node-lib.sh). DIR itself is left for its logs.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="$(realpath -m "$1")"
source "$HERE/node-lib.sh"
TAG="$(echo -n "$DIR" | sha1sum | cut -c1-8)"

# The nodes first (so that they start nothing new), in parallel; then the control plane.
node_down localhost &
for base in "$DIR"/nodes/*/; do
  [ -d "$base" ] && node_down "$(basename "$base")" &
done
wait
stop_pid "$DIR/pids/kube-controller-manager" &
stop_pid "$DIR/pids/kube-apiserver" &
wait
stop_pid "$DIR/pids/etcd"
exit 0
