#!/usr/bin/env bash
# start.sh DIR: a one-node Kubernetes 1.20 cluster of real parts in DIR, on loopback, for tests.
#
# etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager and a kubelet (built from
# Debian's kubernetes source by build.sh, cached outside the checkout) over containerd (Debian's,
# with runc and the CNI bridge plugin). Prints, last:
#
#   KUBECONFIG=<DIR>/pki/admin.kubeconfig
#   KUBECTL=<path of kubectl>
#
# The images `busybox` (docker.io/library/busybox:latest and :1.35) and `pause`
# (docker.io/library/pause:horizon) are in containerd's k8s.io namespace: there is no registry, so a
# pod names one of them with imagePullPolicy IfNotPresent or Never.
#
# Kept off the host: every file is under DIR; containerd and the kubelet run in a private mount
# namespace in which /run, /var/lib and /var/log are DIR's; the kubelet makes no iptables chains.
# stop.sh DIR stops every process by its PID (DIR/pids), removes the CNI bridge and the kubepods
# cgroups, and leaves nothing behind.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="$(realpath -m "$1")"
say() { echo "start.sh: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (containerd, the kubelet and cgroups)"; exit 1; }

need=()
for pkg in etcd-server containerd runc containernetworking-plugins busybox-static buildah openssl gcc libc6-dev iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi
BIN="$("$HERE/build.sh")"
CACHE="$(dirname "$BIN")"

mkdir -p "$DIR"/{pki,pids,logs,etcd,containerd,cni/net.d,cni/ipam,kubelet,host/run,host/var-lib,host/var-log,images}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(free_port); ETCD_PEER=$(free_port); API_PORT=$(free_port); KUBELET_PORT=$(free_port)
TAG="$(echo -n "$DIR" | sha1sum | cut -c1-8)"
BRIDGE="hz${TAG}"                                # at most 15 characters
SUBNET="10.$(( 0x${TAG:0:2} % 200 + 50 )).$(( 0x${TAG:2:2} )).0/24"
echo "$BRIDGE" > "$DIR/bridge"
SOCK="$DIR/containerd/containerd.sock"

# --- certificates: one CA; the apiserver, the admin, the node and the apiserver's kubelet client ---
PKI="$DIR/pki"
if [ ! -f "$PKI/ca.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=horizon-test-ca" \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
  cert() {  # name subject [subjectAltName]
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$PKI/$1.key" -out "$PKI/$1.csr" 2>/dev/null
    local ext="$PKI/$1.ext"
    { echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=serverAuth,clientAuth"; [ -n "${3:-}" ] && echo "subjectAltName=$3"; } > "$ext"
    openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 30 \
      -extfile "$ext" -out "$PKI/$1.crt" 2>/dev/null
  }
  cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default"
  cert admin "/O=system:masters/CN=admin"
  cert node "/O=system:nodes/CN=system:node:localhost"
  cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  cert kubelet-serving "/CN=localhost" "IP:127.0.0.1,DNS:localhost"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
kubeconfig() {  # file user cert
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: horizon-test
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$PKI/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$PKI/$3.crt", client-key: "$PKI/$3.key"}
contexts:
- name: horizon-test
  context: {cluster: horizon-test, user: $2}
current-context: horizon-test
KC
}
kubeconfig "$PKI/admin.kubeconfig" admin admin
kubeconfig "$PKI/node.kubeconfig" system:node:localhost node
KUBECTL=("$BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig")

started() { echo "$2" > "$DIR/pids/$1"; }
wait_for() {  # what seconds command...
  local what="$1" seconds="$2"; shift 2
  local until=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$until" ]; then say "$what not ready within ${seconds} s (logs: $DIR/logs)"; exit 1; fi
    sleep 0.3
  done
}

# --- the control plane ---
etcd --name horizon-test --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "horizon-test=http://127.0.0.1:$ETCD_PEER" >"$DIR/logs/etcd.log" 2>&1 &
started etcd $!
wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

"$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" --insecure-port 0 \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc --api-audiences https://kubernetes.default.svc \
  --service-cluster-ip-range 10.0.0.0/24 --authorization-mode Node,RBAC --allow-privileged \
  --kubelet-client-certificate "$PKI/kubelet-client.crt" --kubelet-client-key "$PKI/kubelet-client.key" \
  --kubelet-preferred-address-types Hostname,InternalIP \
  >"$DIR/logs/kube-apiserver.log" 2>&1 &
started kube-apiserver $!
wait_for kube-apiserver 90 "${KUBECTL[@]}" get --raw /readyz

"$BIN/kube-controller-manager" --kubeconfig "$PKI/admin.kubeconfig" --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port 0 --port 0 \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --use-service-account-credentials=false --controllers '*,-nodeipam,-cloud-node-lifecycle,-route,-service' \
  >"$DIR/logs/kube-controller-manager.log" 2>&1 &
started kube-controller-manager $!

# --- the node: containerd and the kubelet in a private mount namespace ---
cat > "$DIR/containerd/config.toml" <<TOML
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
[grpc]
  address = "$SOCK"
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
    conf_dir = "$DIR/cni/net.d"
TOML
cat > "$DIR/cni/net.d/10-horizon.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "horizon-test", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$DIR/cni/ipam"}}]}
CNI
cat > "$DIR/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzPort: 0
cgroupDriver: cgroupfs
failSwapOn: false
makeIPTablesUtilChains: false
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
YAML
cat > "$DIR/node.sh" <<NODE
#!/usr/bin/env bash
# Runs in its own mount namespace (unshare -m): /run, /var/lib and /var/log are DIR's from here on.
set -euo pipefail
mount --make-rprivate /
mount --bind "$DIR/host/run" /run
mount --bind "$DIR/host/var-lib" /var/lib
mount --bind "$DIR/host/var-log" /var/log
containerd --config "$DIR/containerd/config.toml" >"$DIR/logs/containerd.log" 2>&1 &
echo \$! > "$DIR/pids/containerd"
for _ in \$(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
while [ ! -f "$DIR/images/imported" ]; do sleep 0.2; done
exec "$BIN/kubelet" --config "$DIR/kubelet/config.yaml" --kubeconfig "$PKI/node.kubeconfig" \
  --container-runtime remote --container-runtime-endpoint "unix://$SOCK" \
  --hostname-override localhost --root-dir "$DIR/kubelet/root" --cert-dir "$DIR/kubelet/pki" \
  --pod-infra-container-image docker.io/library/pause:horizon >"$DIR/logs/kubelet.log" 2>&1
NODE
chmod +x "$DIR/node.sh"
unshare --mount --propagation private "$DIR/node.sh" </dev/null &
started kubelet $!
wait_for containerd 30 test -S "$SOCK"

# --- the images, built once per cache (no registry is reachable): a static pause and busybox ---
IMAGES="$CACHE/images"
if [ ! -f "$IMAGES/busybox.tar" ] || [ ! -f "$IMAGES/pause.tar" ]; then
  mkdir -p "$IMAGES/build"
  gcc -static -O2 -DVERSION=horizon -o "$IMAGES/build/pause" "$CACHE/tree/build/pause/linux/pause.c"
  BUILDAH=(buildah --storage-driver vfs --root "$IMAGES/build/root" --runroot "$IMAGES/build/run")
  pack() {  # name tag rootfs-dir entrypoint-json
    local c; c=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" copy "$c" "$3" / >/dev/null
    "${BUILDAH[@]}" config --entrypoint "$4" --cmd '[]' --env PATH=/bin "$c"
    "${BUILDAH[@]}" commit -q "$c" "docker.io/library/$1:$2" >/dev/null
    "${BUILDAH[@]}" rm "$c" >/dev/null
  }
  rm -rf "$IMAGES/build/pause-root" "$IMAGES/build/busybox-root"
  mkdir -p "$IMAGES/build/pause-root/bin" "$IMAGES/build/busybox-root/bin" "$IMAGES/build/busybox-root/tmp"
  cp "$IMAGES/build/pause" "$IMAGES/build/pause-root/bin/pause"
  cp /bin/busybox "$IMAGES/build/busybox-root/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$IMAGES/build/busybox-root/bin/$applet"
  done
  pack pause horizon "$IMAGES/build/pause-root" '["/bin/pause"]'
  pack busybox latest "$IMAGES/build/busybox-root" '[]'
  "${BUILDAH[@]}" tag docker.io/library/busybox:latest docker.io/library/busybox:1.35
  "${BUILDAH[@]}" push -q docker.io/library/pause:horizon "docker-archive:$IMAGES/pause.tar.part:docker.io/library/pause:horizon"
  mv "$IMAGES/pause.tar.part" "$IMAGES/pause.tar"
  "${BUILDAH[@]}" push -q docker.io/library/busybox:latest "docker-archive:$IMAGES/busybox.tar.part:docker.io/library/busybox:latest"
  mv "$IMAGES/busybox.tar.part" "$IMAGES/busybox.tar"
fi
ctr -a "$SOCK" -n k8s.io images import "$IMAGES/pause.tar" >/dev/null
ctr -a "$SOCK" -n k8s.io images import "$IMAGES/busybox.tar" >/dev/null
ctr -a "$SOCK" -n k8s.io images tag docker.io/library/busybox:latest docker.io/library/busybox:1.35 >/dev/null 2>&1 || true
touch "$DIR/images/imported"

ready() { [ "$("${KUBECTL[@]}" get node localhost -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_for "the node" 120 ready
wait_for "the default service account" 60 "${KUBECTL[@]}" get serviceaccount default -n default
echo "KUBECONFIG=$PKI/admin.kubeconfig"
echo "KUBECTL=$BIN/kubectl"
