"""The asv HTML site, made to work offline: ``python -m flashbench.site`` (:mod:`.publish`)."""

from flashbench.site.publish import PublishError, fetch_vendor, localize, main, publish

__all__ = ["PublishError", "fetch_vendor", "localize", "main", "publish"]
