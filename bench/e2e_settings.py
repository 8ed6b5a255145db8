"""Settings for ``bench.e2e``: the portal's own, with the channel layer's Redis names under
a prefix of the benchmark's, so its messages never meet another Redis user's."""

from portal.settings import *  # noqa: F403
from portal.settings import CHANNEL_LAYERS

if "CONFIG" in CHANNEL_LAYERS["default"]:
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = "bench-e2e"
