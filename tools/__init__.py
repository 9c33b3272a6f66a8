"""autoresearch-skills: run ML research campaigns overnight, safely and fast."""

__version__ = "0.1.0"
