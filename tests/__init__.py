"""The test suite, a package so test modules and their helpers import as ``tests.<area>...``."""
