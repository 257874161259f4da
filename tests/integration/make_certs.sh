#!/usr/bin/env bash
# Makes the certificates the TLS tests and bench/tls.sh use, in OUTDIR, with the openssl command
# (nothing secret is kept in the repository). EC P-256 keys throughout.
#
#   ca.pem ca.key             the cluster's CA
#   node.pem node.key         signed by ca; subjectAltName IP:127.0.0.1, DNS:localhost and
#                             every extra IP given; for servers and clients alike (serverAuth
#                             and clientAuth)
#   expired.pem expired.key   signed by ca, same names, valid only in 2020
#   wronghost.pem wronghost.key
#                             signed by ca, for DNS:elsewhere.example and IP:10.9.9.9 only
#   ca2.pem ca2.key           an unrelated CA
#   other.pem other.key       signed by ca2, same names as node
#
# Usage: make_certs.sh OUTDIR [IP]...
set -euo pipefail
out=${1:?usage: make_certs.sh OUTDIR}
mkdir -p "$out"
cd "$out"

# A minimal configuration, so the system's openssl.cnf adds nothing unexpected.
cat >openssl.cnf <<'CNF'
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = sluice
[ ca ]
default_ca = ca_default
[ ca_default ]
database = index.txt
new_certs_dir = issued
serial = serial
default_md = sha256
policy = any
copy_extensions = none
unique_subject = no
[ any ]
commonName = supplied
[ v3_ca ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ node ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = @node_names
[ wronghost ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:elsewhere.example, IP:10.9.9.9
[ node_names ]
IP.1 = 127.0.0.1
DNS.1 = localhost
CNF
n=2
for ip in "${@:2}"; do
    echo "IP.$n = $ip" >>openssl.cnf
    n=$((n + 1))
done
export OPENSSL_CONF=$PWD/openssl.cnf

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # NAME CN
    key "$1.key"
    openssl req -new -x509 -config openssl.cnf -extensions v3_ca -key "$1.key" -out "$1.pem" \
        -days 30 -subj "/CN=$2"
}

leaf() { # NAME CA EXTENSIONS [START END]
    key "$1.key"
    openssl req -new -config openssl.cnf -key "$1.key" -out "$1.csr" -subj "/CN=sluice-$1"
    local dates=(-days 30)
    [ $# -ge 5 ] && dates=(-startdate "$4" -enddate "$5")
    : >index.txt
    mkdir -p issued
    [ -f serial ] || echo 1000 >serial
    openssl ca -batch -config openssl.cnf -notext -cert "$2.pem" -keyfile "$2.key" \
        -extensions "$3" "${dates[@]}" -in "$1.csr" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr"
}

ca ca sluice-test-ca
ca ca2 sluice-other-ca
leaf node ca node
leaf expired ca node 20200101000000Z 20200102000000Z
leaf wronghost ca wronghost
leaf other ca2 node
rm -rf index.txt* serial* issued
chmod 600 ./*.key
