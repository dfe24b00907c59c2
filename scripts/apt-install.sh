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
# Another install may be under way (two setup steps started at once): wait for its lock.
wait_lock=(-o DPkg::Lock::Timeout=600)
apt-get "${wait_lock[@]}" update -qq
apt-get "${wait_lock[@]}" install -y -qq --no-install-recommends "$@" >/dev/null
