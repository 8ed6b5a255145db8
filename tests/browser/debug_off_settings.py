"""The portal's own settings, read from a DEBUG=0 environment, for the browser test of
the error pages as production serves them. Two things differ: the URLs add one view that
fails (a 500 needs a real fault), and the collected static files live where the test put
them (WhiteNoise serves them, under hashed names, as in production)."""

import os

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "tests.browser.debug_off_urls"
STATIC_ROOT = os.environ["PORTAL_TEST_STATIC_ROOT"]
