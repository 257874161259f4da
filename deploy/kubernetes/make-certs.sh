#!/usr/bin/env bash
# Makes the certificates the manifests mount (see docs/deploying.md), in DIR, with openssl.
# EC P-256 keys; the CA for 10 years, the others for 1 year.
#
#   ca.pem ca.key             the cluster's CA. ca.key goes into no Secret: keep it safe to issue
#                             more certificates; a second run with it in DIR reuses the CA
#   dispatcher.pem .key       serverAuth and clientAuth (a replica dials its peers' Raft port);
#                             DNS:sluice-dispatcher, sluice-dispatcher.NS.svc and
#                             sluice-dispatcher.NS.svc.DOMAIN (the names the Service answers to),
#                             and for the three replicas of dispatcher-replicas.yaml each pod's
#                             sluice-dispatcher-N.sluice-dispatcher-raft.NS.svc (and .DOMAIN):
#                             peers dial those, and followers send callers there
#   worker.pem .key           serverAuth and clientAuth (a worker dials its dispatcher);
#                             DNS:sluice-worker.NS.svc, the one name every worker pod presents
#                             (pods advertise their IPs, which are assigned only at start);
#                             readers verify workers against it with --tls-worker-name. It need
#                             not resolve: nobody dials it
#   client.pem .key           clientAuth, for trainers and the CLI
#
# Usage: make-certs.sh DIR [NAMESPACE [CLUSTER_DOMAIN]]    (defaults: sluice, cluster.local)
# DISPATCHER_SAN and WORKER_SAN replace the subjectAltName lists, e.g.
#   DISPATCHER_SAN=DNS:sluice-dispatcher,DNS:sluice.example.com make-certs.sh deploy/kubernetes
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR [NAMESPACE [CLUSTER_DOMAIN]]}
ns=${2:-sluice}
domain=${3:-cluster.local}
replica_san=""
for i in 0 1 2; do
    replica_san="$replica_san,DNS:sluice-dispatcher-$i.sluice-dispatcher-raft.$ns.svc"
    replica_san="$replica_san,DNS:sluice-dispatcher-$i.sluice-dispatcher-raft.$ns.svc.$domain"
done
dispatcher_san=${DISPATCHER_SAN:-DNS:sluice-dispatcher,DNS:sluice-dispatcher.$ns.svc,DNS:sluice-dispatcher.$ns.svc.$domain$replica_san}
worker_san=${WORKER_SAN:-DNS:sluice-worker.$ns.svc}

mkdir -p "$dir"
cd "$dir"
umask 077
ext=$(mktemp)
trap 'rm -f "$ext" ./*.csr' EXIT
# Only what is written here: the system's openssl.cnf adds nothing.
export OPENSSL_CONF=/dev/null

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }

if [ ! -f ca.key ]; then
    key ca
    openssl req -new -x509 -key ca.key -out ca.pem -days 3650 -subj "/CN=sluice CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash"
fi

leaf() { # NAME EXTENDED-KEY-USAGE [SUBJECT-ALT-NAMES]
    key "$1"
    openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=sluice-$1"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$2"
        echo "authorityKeyIdentifier=keyid"
        if [ -n "${3:-}" ]; then echo "subjectAltName=$3"; fi
    } >"$ext"
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
        -days 365 -sha256 -extfile "$ext" -out "$1.pem" 2>/dev/null
}

leaf dispatcher serverAuth,clientAuth "$dispatcher_san"
leaf worker serverAuth,clientAuth "$worker_san"
leaf client clientAuth
chmod 644 ca.pem dispatcher.pem worker.pem client.pem
