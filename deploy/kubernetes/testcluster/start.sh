#!/usr/bin/env bash
# start.sh DIR: a Kubernetes 1.20 cluster of real parts in DIR, on loopback, for tests: one node
# `localhost`, or NODES=N nodes (`localhost`, `node-2`, ... `node-N`; node-up.sh DIR NAME adds one to
# a running cluster, node-down.sh DIR NAME takes it away).
#
# etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager and a kubelet per node (built
# from Debian's kubernetes source by build.sh, cached outside the checkout), each over a containerd
# of its own (Debian's, with runc and the CNI bridge plugin). Prints, last:
#
#   KUBECONFIG=<DIR>/pki/admin.kubeconfig
#   KUBECTL=<path of kubectl>
#
# The images `busybox` (docker.io/library/busybox:latest and :1.35) and `pause`
# (docker.io/library/pause:horizon) are in each containerd's k8s.io namespace: there is no registry,
# so a pod names one of them with imagePullPolicy IfNotPresent or Never.
#
# Kept off the host: every file is under DIR; each node's containerd and kubelet run in a private
# mount namespace in which /run, /var/lib and /var/log are the node's folders; the kubelets make no
# iptables chains; the API server finds the nodes' names in DIR/hosts, its /etc/hosts in a mount
# namespace of its own (node-lib.sh). stop.sh DIR stops every process by its PID, removes the CNI
# bridges and the nodes' cgroups, and leaves nothing behind.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="$(realpath -m "$1")"
source "$HERE/node-lib.sh"
NODES="${NODES:-1}"
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || { say "NODES must be a number of nodes, not ${NODES}"; exit 2; }
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

mkdir -p "$DIR"/{pki,pids,logs,etcd,nodes}
ETCD_PORT=$(free_port); ETCD_PEER=$(free_port); API_PORT=$(free_port)
TAG="$(echo -n "$DIR" | sha1sum | cut -c1-8)"
# what node-up.sh needs to add a node later
printf 'BIN=%q\nCACHE=%q\nAPI_PORT=%q\nTAG=%q\n' "$BIN" "$CACHE" "$API_PORT" "$TAG" > "$DIR/cluster.env"
NAMES=(localhost)
for i in $(seq 2 "$NODES"); do NAMES+=("node-$i"); done
# The nodes' names as the API server resolves them (it reaches a kubelet by its name: Hostname first)
{ cat /etc/hosts; echo "127.0.0.1 ${NAMES[*]}"; } > "$DIR/hosts"

# --- certificates: one CA; the apiserver, the admin, the kubelets (serving) and the apiserver's kubelet client (each node's own: node-lib.sh) ---
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
KUBECTL=("$BIN/kubectl" --kubeconfig "$PKI/admin.kubeconfig")

started() { echo "$2" > "$DIR/pids/$1"; }

# --- the control plane ---
etcd --name horizon-test --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "horizon-test=http://127.0.0.1:$ETCD_PEER" >"$DIR/logs/etcd.log" 2>&1 &
started etcd $!
wait_for etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

# The API server's audit log (DIR/logs/audit.log) records every Binding (with its target node), every
# pod created and every pod deletion (with its grace period), whoever asked: the tests count them
# ("every pod bound exactly once", "stopped by deletion with the grace period").
cat > "$DIR/audit-policy.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  resources: [{group: "", resources: ["pods/binding"]}]
- level: Request
  verbs: ["delete"]
  resources: [{group: "", resources: ["pods"]}]
- level: Metadata
  verbs: ["create"]
  resources: [{group: "", resources: ["pods"]}]
- level: None
YAML
# in a mount namespace of its own, where /etc/hosts is DIR/hosts (the nodes' names)
unshare --mount --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$DIR/hosts" \
  "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" --insecure-port 0 \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-issuer https://kubernetes.default.svc --api-audiences https://kubernetes.default.svc \
  --service-cluster-ip-range 10.0.0.0/24 --authorization-mode Node,RBAC --allow-privileged \
  --kubelet-client-certificate "$PKI/kubelet-client.crt" --kubelet-client-key "$PKI/kubelet-client.key" \
  --kubelet-preferred-address-types Hostname,InternalIP \
  --audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log" \
  >"$DIR/logs/kube-apiserver.log" 2>&1 &
started kube-apiserver $!
wait_for kube-apiserver 90 "${KUBECTL[@]}" get --raw /readyz

"$BIN/kube-controller-manager" --kubeconfig "$PKI/admin.kubeconfig" --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port 0 --port 0 \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --use-service-account-credentials=false --controllers '*,-nodeipam,-cloud-node-lifecycle,-route,-service' \
  >"$DIR/logs/kube-controller-manager.log" 2>&1 &
started kube-controller-manager $!

# --- the nodes: each a kubelet over a containerd of its own, in a private mount namespace ---
for i in "${!NAMES[@]}"; do node_up "${NAMES[$i]}" "$i"; done
for name in "${NAMES[@]}"; do wait_for "the node $name" 120 node_ready "$name"; done
wait_for "the default service account" 60 "${KUBECTL[@]}" get serviceaccount default -n default
echo "KUBECONFIG=$PKI/admin.kubeconfig"
echo "KUBECTL=$BIN/kubectl"
