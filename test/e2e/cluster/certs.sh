#!/usr/bin/env bash
# certs.sh <apiserver-ip> <node-name>...: the cluster's CA, the certificates and keys of its parts,
# the service-account key pair, and one kubeconfig per client (certificates embedded), under
# /var/lib/csi-fat-e2e: the kubelet's is kubelet.kubeconfig for a single node, else
# kubelet-<node>.kubeconfig for each. Run by up.sh; every bring-up gets a fresh CA.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
node_ip=$1
shift
node_names=("$@")

mkdir -p "$PKI"
cd "$PKI"

# ECDSA P-256 keys (as kubeadm's ECDSA-P256 option): made in milliseconds where RSA takes seconds.
new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

openssl_quiet() {
	local out
	out=$(openssl "$@" 2>&1) || {
		echo "$out" >&2
		return 1
	}
}

# sign <name> <subject> <extensions>: a certificate for <name>.key signed by the CA.
sign() {
	local name=$1 subject=$2 extensions=$3
	new_key "$name"
	openssl_quiet req -new -key "$name.key" -subj "$subject" -out "$name.csr"
	printf 'basicConstraints=critical,CA:FALSE\n%s\n' "$extensions" >"$name.ext"
	openssl_quiet x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
		-days 365 -sha256 -extfile "$name.ext" -out "$name.crt"
	rm "$name.csr" "$name.ext"
}

client() { sign "$1" "$2" $'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth'; }

new_key ca
openssl_quiet req -x509 -new -key ca.key -subj "/CN=csi-fat-e2e-ca" -days 3650 -sha256 -out ca.crt \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,digitalSignature,keyCertSign,cRLSign"

# In-cluster clients dial the kubernetes Service's ClusterIP; the others dial the node's address.
sign apiserver "/CN=kube-apiserver" "keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:$SERVICE_IP,IP:$node_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"

client admin "/O=system:masters/CN=kubernetes-admin"
client controller-manager "/CN=system:kube-controller-manager"
client scheduler "/CN=system:kube-scheduler"
client kube-proxy "/CN=system:kube-proxy"
# The Node authorizer only lets a kubelet act for the node its certificate names.
kubelets=()
if [ ${#node_names[@]} -eq 1 ]; then
	client kubelet "/O=system:nodes/CN=system:node:${node_names[0]}"
	kubelets=(kubelet)
else
	for n in "${node_names[@]}"; do
		client "kubelet-$n" "/O=system:nodes/CN=system:node:$n"
		kubelets+=("kubelet-$n")
	done
fi
client apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
# The snapshot controller runs on the host too; up.sh grants this user what it needs (RBAC).
client snapshot-controller "/CN=csi-fat-e2e:snapshot-controller"

new_key sa
openssl_quiet pkey -in sa.key -pubout -out sa.pub
chmod 600 ./*.key

# kubeconfig <file> <client>: a kubeconfig for the client's certificate, all data embedded.
kubeconfig() {
	local file=$1 client=$2
	cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: csi-fat-e2e
  cluster:
    server: https://$node_ip:6443
    certificate-authority-data: $(base64 -w0 ca.crt)
users:
- name: $client
  user:
    client-certificate-data: $(base64 -w0 "$client.crt")
    client-key-data: $(base64 -w0 "$client.key")
contexts:
- name: csi-fat-e2e
  context: {cluster: csi-fat-e2e, user: $client}
current-context: csi-fat-e2e
EOF
	chmod 600 "$file"
}

for c in controller-manager scheduler kube-proxy "${kubelets[@]}" snapshot-controller; do
	kubeconfig "$CONF/$c.kubeconfig" "$c"
done
kubeconfig "$KUBECONFIG_ADMIN" admin
