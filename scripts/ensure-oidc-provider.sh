#!/usr/bin/env bash
# The OpenID provider the sign-in tests run against (tests/oidc/provider.mjs): the npm package
# oidc-provider, installed once under var/oidc-provider. Needs Node.js 20 or later.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=var/oidc-provider
if [ -f "$prefix/node_modules/oidc-provider/package.json" ]; then
    exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "Node.js and npm are needed for the OIDC sign-in tests (Debian: apt-get install nodejs npm)." >&2
    exit 1
fi
mkdir -p "$prefix"
npm install --silent --no-audit --no-fund --prefix "$prefix" oidc-provider@9.13.3
echo "Installed oidc-provider under $prefix."
