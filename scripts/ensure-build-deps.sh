#!/usr/bin/env bash
# What pip needs to build the locked requirements: python-ldap (under django-auth-ldap) ships as
# source only, and compiles against the OpenLDAP and SASL headers.
set -euo pipefail

missing=()
command -v gcc >/dev/null || missing+=(gcc)
[ -e /usr/include/ldap.h ] || missing+=(libldap2-dev)
[ -e /usr/include/sasl/sasl.h ] || missing+=(libsasl2-dev)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "Missing build packages: ${missing[*]}. Install them with: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "Installing ${missing[*]} ..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
