#!/usr/bin/env bash
# What pip needs to build the locked requirements: python-ldap (under django-auth-ldap) ships as
# source only, and compiles against the OpenLDAP and SASL headers.
set -euo pipefail

missing=()
command -v gcc >/dev/null || missing+=(gcc)
[ -e /usr/include/ldap.h ] || missing+=(libldap2-dev)
[ -e /usr/include/sasl/sasl.h ] || missing+=(libsasl2-dev)
"$(dirname "$0")/apt-install.sh" ${missing[@]+"${missing[@]}"}
