# node-lib.sh: what start.sh, node-up.sh, node-down.sh and stop.sh share about a node of the test
# cluster (sourced, not run). A node is a kubelet over a containerd of its own, both in a private mount
# namespace in which /run, /var/lib and /var/log are the node's folders: two kubelets never see each
# other's containers, pod folders or logs (a kubelet removes those of pods it does not know).
#
# The first node, `localhost`, keeps its files in DIR itself (DIR/containerd, DIR/kubelet, ...) and
# its pods' cgroups under /kubepods; another node NAME keeps them in DIR/nodes/NAME and its cgroups
# under /hz<tag>-NAME/kubepods (its kubelet's cgroupRoot), so that no kubelet takes another's pod
# cgroups for orphans. Its name resolves to 127.0.0.1 for the API server through DIR/hosts, which the
# API server sees as /etc/hosts in its own mount namespace (start.sh): the host's /etc/hosts is not
# touched.

say() { echo "$(basename "$0"): $*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_for() {  # what seconds command...
  local what="$1" seconds="$2"; shift 2
  local until=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$until" ]; then say "$what not ready within ${seconds} s (logs: $DIR/logs)"; exit 1; fi
    sleep 0.3
  done
}

node_base() {  # NAME -> the node's folder
  if [ "$1" = localhost ]; then echo "$DIR"; else echo "$DIR/nodes/$1"; fi
}

# The cgroup hierarchies: /sys/fs/cgroup itself (cgroup v2) or one folder each under it (v1).
cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup /sys/fs/cgroup/*; do
    [ -d "$d" ] && [ -f "$d/cgroup.procs" ] && echo "$d"
  done
}

node_cgroup_root() {  # NAME -> the kubelet's cgroupRoot ("/" for localhost)
  if [ "$1" = localhost ]; then echo /; else echo "/hz${TAG}-$1"; fi
}

node_cert() {  # NAME: its client certificate (system:node:NAME) and kubeconfig, once
  local name="$1" pki="$DIR/pki"
  [ -f "$pki/node-$name.kubeconfig" ] && return 0
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:nodes/CN=system:node:$name" \
    -keyout "$pki/node-$name.key" -out "$pki/node-$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    > "$pki/node-$name.ext"
  openssl x509 -req -in "$pki/node-$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
    -extfile "$pki/node-$name.ext" -out "$pki/node-$name.crt" 2>/dev/null
  cat > "$pki/node-$name.kubeconfig.part" <<KC
apiVersion: v1
kind: Config
clusters:
- name: horizon-test
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: system:node:$name
  user: {client-certificate: "$pki/node-$name.crt", client-key: "$pki/node-$name.key"}
contexts:
- name: horizon-test
  context: {cluster: horizon-test, user: system:node:$name}
current-context: horizon-test
KC
  mv "$pki/node-$name.kubeconfig.part" "$pki/node-$name.kubeconfig"
}

# The images, built once per cache (no registry is reachable): a static pause and busybox.
ensure_images() {
  local images="$CACHE/images"
  [ -f "$images/busybox.tar" ] && [ -f "$images/pause.tar" ] && return 0
  mkdir -p "$images/build"
  gcc -static -O2 -DVERSION=horizon -o "$images/build/pause" "$CACHE/tree/build/pause/linux/pause.c"
  local buildah=(buildah --storage-driver vfs --root "$images/build/root" --runroot "$images/build/run")
  pack() {  # name tag rootfs-dir entrypoint-json
    local c; c=$("${buildah[@]}" from scratch)
    "${buildah[@]}" copy "$c" "$3" / >/dev/null
    "${buildah[@]}" config --entrypoint "$4" --cmd '[]' --env PATH=/bin "$c"
    "${buildah[@]}" commit -q "$c" "docker.io/library/$1:$2" >/dev/null
    "${buildah[@]}" rm "$c" >/dev/null
  }
  rm -rf "$images/build/pause-root" "$images/build/busybox-root"
  mkdir -p "$images/build/pause-root/bin" "$images/build/busybox-root/bin" "$images/build/busybox-root/tmp"
  cp "$images/build/pause" "$images/build/pause-root/bin/pause"
  cp /bin/busybox "$images/build/busybox-root/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$images/build/busybox-root/bin/$applet"
  done
  pack pause horizon "$images/build/pause-root" '["/bin/pause"]'
  pack busybox latest "$images/build/busybox-root" '[]'
  "${buildah[@]}" tag docker.io/library/busybox:latest docker.io/library/busybox:1.35
  "${buildah[@]}" push -q docker.io/library/pause:horizon "docker-archive:$images/pause.tar.part:docker.io/library/pause:horizon"
  mv "$images/pause.tar.part" "$images/pause.tar"
  "${buildah[@]}" push -q docker.io/library/busybox:latest "docker-archive:$images/busybox.tar.part:docker.io/library/busybox:latest"
  mv "$images/busybox.tar.part" "$images/busybox.tar"
}

node_up() {  # NAME INDEX: start the node's containerd and kubelet (INDEX 0 is localhost); Ready is waited for apart
  local name="$1" index="$2"
  local base; base="$(node_base "$name")"
  local sock="$base/containerd/containerd.sock" port bridge subnet root
  mkdir -p "$base"/{pids,logs,containerd,cni/net.d,cni/ipam,kubelet,host/run,host/var-lib,host/var-log,images}
  port=$(free_port)
  if [ "$index" = 0 ]; then bridge="hz${TAG}"; else bridge="hz${TAG}n${index}"; fi  # at most 15 characters
  subnet="10.$(( 0x${TAG:0:2} % 200 + 50 )).$(( (0x${TAG:2:2} + index) % 256 )).0/24"
  echo "$bridge" > "$base/bridge"
  root="$(node_cgroup_root "$name")"
  if [ "$root" != / ]; then  # the kubelet wants its cgroupRoot to exist in every hierarchy
    local h
    for h in $(cgroup_hierarchies); do
      mkdir -p "$h$root"
      if [ -f "$h/cpuset.cpus" ]; then
        cat "$h/cpuset.cpus" > "$h$root/cpuset.cpus"; cat "$h/cpuset.mems" > "$h$root/cpuset.mems"
      fi
    done
  fi
  node_cert "$name"
  cat > "$base/containerd/config.toml" <<TOML
version = 2
root = "$base/containerd/root"
state = "$base/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/pause:horizon"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$base/cni/net.d"
TOML
  cat > "$base/cni/net.d/10-horizon.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "horizon-test", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet"}]], "dataDir": "$base/cni/ipam"}}]}
CNI
  cat > "$base/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $port
readOnlyPort: 0
healthzPort: 0
cgroupDriver: cgroupfs
cgroupRoot: $root
failSwapOn: false
makeIPTablesUtilChains: false
tlsCertFile: $DIR/pki/kubelet-serving.crt
tlsPrivateKeyFile: $DIR/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
YAML
  cat > "$base/node.sh" <<NODE
#!/usr/bin/env bash
# Runs in its own mount namespace (unshare -m): /run, /var/lib and /var/log are the node's from here on.
set -euo pipefail
mount --make-rprivate /
mount --bind "$base/host/run" /run
mount --bind "$base/host/var-lib" /var/lib
mount --bind "$base/host/var-log" /var/log
containerd --config "$base/containerd/config.toml" >"$base/logs/containerd.log" 2>&1 &
echo \$! > "$base/pids/containerd"
for _ in \$(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
while [ ! -f "$base/images/imported" ]; do sleep 0.2; done
exec "$BIN/kubelet" --config "$base/kubelet/config.yaml" --kubeconfig "$DIR/pki/node-$name.kubeconfig" \
  --container-runtime remote --container-runtime-endpoint "unix://$sock" \
  --hostname-override "$name" --root-dir "$base/kubelet/root" --cert-dir "$base/kubelet/pki" \
  --pod-infra-container-image docker.io/library/pause:horizon >"$base/logs/kubelet.log" 2>&1
NODE
  chmod +x "$base/node.sh"
  unshare --mount --propagation private "$base/node.sh" </dev/null &
  echo $! > "$base/pids/kubelet"
  wait_for "containerd of $name" 30 test -S "$sock"
  ensure_images
  ctr -a "$sock" -n k8s.io images import "$CACHE/images/pause.tar" >/dev/null
  ctr -a "$sock" -n k8s.io images import "$CACHE/images/busybox.tar" >/dev/null
  ctr -a "$sock" -n k8s.io images tag docker.io/library/busybox:latest docker.io/library/busybox:1.35 >/dev/null 2>&1 || true
  touch "$base/images/imported"
}

node_ready() {  # NAME: Ready, and the node controller has taken its not-ready taint away (pods may go there)
  [ "$("$BIN/kubectl" --kubeconfig "$DIR/pki/admin.kubeconfig" get node "$1" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}' 2>/dev/null)" = "True " ]
}

stop_pid() {  # pid-file: SIGTERM, then SIGKILL after 10 s
  local file="$1" pid
  [ -f "$file" ] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

node_down() {  # NAME: its kubelet, every container, containerd and its shims, its bridge and its cgroups
  local name="$1"
  local base; base="$(node_base "$name")"
  local sock="$base/containerd/containerd.sock" task proc root h
  stop_pid "$base/pids/kubelet"  # first, so that it starts nothing new
  if [ -S "$sock" ]; then
    for task in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1
    done
    sleep 0.5
    for task in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1
    done
  fi
  stop_pid "$base/pids/containerd"
  # containerd's shims outlive it: each names its node's socket on its command line.
  for proc in /proc/[0-9]*; do
    if tr '\0' ' ' 2>/dev/null < "$proc/cmdline" | grep -q -- "-address $sock"; then
      kill -9 "${proc#/proc/}" 2>/dev/null
    fi
  done
  if [ -f "$base/bridge" ]; then
    ip link del "$(cat "$base/bridge")" 2>/dev/null
  fi
  # The kubelet's cgroups (cgroupfs driver): deepest first; the pods' processes are gone by now.
  root="$(node_cgroup_root "$name")"
  for h in $(cgroup_hierarchies); do
    if [ "$root" = / ]; then
      [ -d "$h/kubepods" ] && find "$h/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null
    elif [ -d "$h$root" ]; then
      find "$h$root" -depth -type d -exec rmdir {} \; 2>/dev/null
    fi
  done
  return 0
}
