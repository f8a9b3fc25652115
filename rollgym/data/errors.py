"""The data package's one exception root.

DataError            generation, reading an archive or writing an export went wrong
"""

from __future__ import annotations


class DataError(Exception):
    """Something the data commands cannot do; the message says what and how to fix it."""
