"""The host part of every data file's provenance, in one place: what a trace, scan or probe was made on."""

import platform


def host() -> dict:
    """Platform, machine and Python of this process, as each data file's ``provenance.host`` records them."""
    return {
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
