#!/usr/bin/env bash
# stop.sh DIR: stop the test cluster start.sh started in DIR and leave nothing behind on the host:
# its pods' containers, the kubelet, containerd, the control plane and etcd (each by the PID it
# recorded), the CNI bridge and the kubepods cgroups. DIR itself is left for its logs.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
DIR="$(realpath -m "$1")"
SOCK="$DIR/containerd/containerd.sock"
say() { echo "stop.sh: $*" >&2; }

stop_pid() {  # name: SIGTERM, then SIGKILL after 10 s
  local file="$DIR/pids/$1" pid
  [ -f "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

# The kubelet first (so it starts nothing new), then every container containerd still runs.
stop_pid kubelet
if [ -S "$SOCK" ]; then
  for task in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1
  done
  sleep 0.5
  for task in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$SOCK" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1
  done
fi
stop_pid containerd
# containerd's shims outlive it: each names this cluster's socket on its command line.
for proc in /proc/[0-9]*; do
  if tr '\0' ' ' < "$proc/cmdline" 2>/dev/null | grep -q -- "-address $SOCK"; then
    kill -9 "${proc#/proc/}" 2>/dev/null
  fi
done
stop_pid kube-controller-manager &
stop_pid kube-apiserver &
wait
stop_pid etcd

if [ -f "$DIR/bridge" ]; then
  ip link del "$(cat "$DIR/bridge")" 2>/dev/null
fi
# The kubelet's cgroups (cgroupfs driver): deepest first; a pod's processes are gone by now.
for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$root" ] || continue
  find "$root" -depth -type d -exec rmdir {} \; 2>/dev/null
done
exit 0
