#!/usr/bin/env bash
# Sourced by scripts/test.sh: what the fleet ledger (crates/sion_fleet) needs — etcd itself
# (its tests start real members on loopback, one with TLS and authentication), openssl for
# their certificates, and protoc with the well-known protobuf types
# (etcd-client's build generates its gRPC code). Debian's packages, installed with apt when
# missing.
_sion_etcd_missing=()
command -v etcd >/dev/null 2>&1 || _sion_etcd_missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || _sion_etcd_missing+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/descriptor.proto ] || _sion_etcd_missing+=(libprotobuf-dev)
# The certificates of an etcd that only front-ends may reach (scripts/etcd-pki.sh).
command -v openssl >/dev/null 2>&1 || _sion_etcd_missing+=(openssl)
if [ ${#_sion_etcd_missing[@]} -gt 0 ]; then
    echo "etcd: installing ${_sion_etcd_missing[*]} with apt" >&2
    _sion_sudo=""
    [ "$(id -u)" -eq 0 ] || _sion_sudo=sudo
    $_sion_sudo apt-get update -q >/dev/null &&
        $_sion_sudo apt-get install -y -q --no-install-recommends "${_sion_etcd_missing[@]}" >/dev/null
    # Debian starts the packaged etcd as a service on the default ports; the tests start their
    # own members on free ports and do not use it.
fi
unset _sion_etcd_missing _sion_sudo
