"""Settings for ``bench.portal``: the portal's own, with the channel layer chosen by
``BENCH_CHANNEL_LAYER``: "pubsub", the portal's ``RedisPubSubChannelLayer``, or "core",
channels-redis's ``RedisChannelLayer`` as the portal configured it before it moved to
pub/sub, so the fan-out can be compared on both."""

import os

from portal.settings import *  # noqa: F403
from portal.settings import REDIS_URL

if os.environ.get("BENCH_CHANNEL_LAYER") == "core":
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout, the same 5 s this layer blocks
            # in BZPOPMIN; idle consumers crashed without the extra room.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
                "capacity": 1500,
                "expiry": 30,
            },
        }
    }
