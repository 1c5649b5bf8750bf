"""The zoo's former place: it lives in opcov.sources.zoo, below the producers (tracing and probe both read
it). opcov.cli still imports it from here; this goes once it imports opcov.sources."""

from opcov.sources.zoo import *  # noqa: F403
