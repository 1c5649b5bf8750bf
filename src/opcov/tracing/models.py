"""The model builders' former place: they live in opcov.sources.models, below the producers (tracing and
probe both build models). opcov.cli still imports Sizes from here; this goes once it imports opcov.sources."""

from opcov.sources.models import *  # noqa: F403
from opcov.sources.models import Sizes  # noqa: F401
