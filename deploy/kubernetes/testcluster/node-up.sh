#!/usr/bin/env bash
# node-up.sh DIR NAME: add a node NAME (a kubelet over a containerd of its own, node-lib.sh) to the
# test cluster start.sh runs in DIR, and wait until it is Ready. Its name resolves for the API server
# through DIR/hosts. node-down.sh DIR NAME takes it away; stop.sh DIR stops it with the rest.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 DIR NAME" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="$(realpath -m "$1")"
NAME="$2"
source "$HERE/node-lib.sh"
[[ "$NAME" =~ ^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$ ]] || { say "a node's name is a DNS label of up to 42 characters, not ${NAME}"; exit 2; }
[ -f "$DIR/cluster.env" ] || { say "no test cluster in $DIR (start.sh DIR starts one)"; exit 1; }
source "$DIR/cluster.env"
if [ -f "$(node_base "$NAME")/pids/kubelet" ] && kill -0 "$(cat "$(node_base "$NAME")/pids/kubelet")" 2>/dev/null; then
  say "the node $NAME runs already"; exit 1
fi
grep -qw -- "$NAME" "$DIR/hosts" || echo "127.0.0.1 $NAME" >> "$DIR/hosts"  # in place: the API server's /etc/hosts
# its index: the next free one (its bridge and subnet)
index=1
while [ -d "$DIR/nodes" ] && grep -qx "hz${TAG}n${index}" "$DIR"/nodes/*/bridge 2>/dev/null; do index=$((index + 1)); done
[ -f "$(node_base "$NAME")/bridge" ] && index="$(sed -n "s/^hz${TAG}n//p" "$(node_base "$NAME")/bridge")"
node_up "$NAME" "$index"
wait_for "the node $NAME" 120 node_ready "$NAME"
echo "NODE=$NAME"
