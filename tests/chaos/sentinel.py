"""The chaos world with its Redis behind Sentinel (tests/support/sentinel_redis.py) in place of
ChaosRedis: a Redis SIGKILL fault kills the master, and the run's Redis is "back" once the
sentinels name the promoted replica."""

from __future__ import annotations

from tests.chaos.world import World
from tests.support.sentinel_redis import MASTER_NAME, SentinelRedis


class SentinelWorld(World):
    """The chaos world with its Redis behind Sentinel: gateways and worker find the master
    through the sentinels (REDIS_SENTINELS), Celery's broker included."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sentinel_redis = SentinelRedis()
        self.redis = self.sentinel_redis  # type: ignore[assignment]
        self.env["REDIS_URL"] = self.sentinel_redis.url
        self.env["REDIS_SENTINELS"] = self.sentinel_redis.sentinels
        self.env["REDIS_SENTINEL_MASTER"] = MASTER_NAME
        del self.env["CELERY_BROKER_URL"]  # derived: kombu's sentinel transport

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            self.sentinel_redis.stop_all()
