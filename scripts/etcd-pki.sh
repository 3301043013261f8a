#!/usr/bin/env bash
# Certificates for an etcd cluster that only the fleet ledger's front-ends may talk to
# (docs/FLEET-LEDGER.md, "etcd: TLS and authentication"): a CA of the operator's own, a server
# certificate for the members (valid for the names and addresses given), and a client
# certificate for the front-ends. Everything is written 0600 into DIR (made 0700).
#
#   bash scripts/etcd-pki.sh DIR [SAN ...]     SAN: DNS:name or IP:address (default IP:127.0.0.1)
#
# DIR then holds ca.pem (give it to members and front-ends), server.pem + server.key (members),
# client.pem + client.key (front-ends: `--etcd-ca --etcd-cert --etcd-key`). The client
# certificate's name (CN sion-ledger-frontend) is not an etcd user: a stolen certificate alone
# reads and writes nothing once auth is enabled; the front-end also signs in as a user.
set -euo pipefail
dir=${1:?usage: etcd-pki.sh DIR [SAN ...]}
shift
sans=("$@")
[ ${#sans[@]} -gt 0 ] || sans=("IP:127.0.0.1")
san=$(IFS=,; echo "${sans[*]}")
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
days=3650
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=sion fleet etcd CA" -keyout ca.key -out ca.pem 2>/dev/null
make_cert() { # name CN extensions
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
        -keyout "$1.key" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days "$days" \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}
make_cert server "sion-etcd" "subjectAltName=$san
extendedKeyUsage=serverAuth,clientAuth"
make_cert client "sion-ledger-frontend" "extendedKeyUsage=clientAuth"
rm -f ca.srl
chmod 600 ./*
echo "etcd-pki: CA, server (${san}) and client certificates in $dir" >&2
