"""Code the tests share: fakes, sample builders, settings. Ray workers import it as ``tests.support``."""
