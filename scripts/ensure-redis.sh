#!/usr/bin/env bash
# Use the Redis at $REDIS_URL (default redis://127.0.0.1:6379/0: database 0) when it answers;
# otherwise start a private redis-server there.
set -euo pipefail
cd "$(dirname "$0")/.."

url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
hostport="${url#redis://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"
host="${hostport%%:*}"; port="${hostport##*:}"
[ "$port" = "$host" ] && port=6379

ping() { (exec 3<>"/dev/tcp/$host/$port" && printf 'PING\r\n' >&3 && timeout 2 head -c 5 <&3 | grep -q PONG) 2>/dev/null; }

if ping; then
    echo "Redis answers at $host:$port; the portal uses $url."
    exit 0
fi
if ! command -v redis-server >/dev/null; then
    echo "No Redis answers at $host:$port and redis-server is not installed." >&2
    echo "Install it (Debian/Ubuntu: apt-get install redis-server) or set REDIS_URL." >&2
    exit 1
fi
mkdir -p var/redis
redis-server --bind "$host" --port "$port" --daemonize yes --save "" --appendonly no \
    --dir "$PWD/var/redis" --logfile "$PWD/var/redis/redis.log" --pidfile "$PWD/var/redis/redis.pid"
for _ in $(seq 1 100); do
    if ping; then echo "Started a private redis-server at $host:$port; the portal uses $url."; exit 0; fi
    sleep 0.1
done
echo "redis-server did not come up; see var/redis/redis.log" >&2
exit 1
