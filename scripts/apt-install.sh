#!/usr/bin/env bash
# Install the Debian packages named, as root through apt-get; otherwise say how, and fail.
set -euo pipefail
[ $# -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "Missing system packages: $*. Install them with: sudo apt-get install -y $*" >&2
    exit 1
fi
echo "Installing $* ..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
