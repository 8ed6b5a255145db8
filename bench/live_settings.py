"""Settings for ``bench.portal``: the portal's own, with the channel layer chosen by
``BENCH_CHANNEL_LAYER`` ("core", the portal's ``RedisChannelLayer``, or "pubsub",
channels-redis's ``RedisPubSubChannelLayer``), so the fan-out can be compared on both."""

import os

from portal.settings import *  # noqa: F403
from portal.settings import REDIS_URL

if os.environ.get("BENCH_CHANNEL_LAYER") == "pubsub":
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
