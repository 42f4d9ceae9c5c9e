"""Icons and static files shipped with the package."""

import os

ASSETS_DIR = os.path.dirname(os.path.abspath(__file__))
