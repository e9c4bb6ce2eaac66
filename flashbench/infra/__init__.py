"""Plumbing every room shares: asv machine names (:mod:`.machine`), file locks (:mod:`.locks`),
git (:mod:`.git`), asv as a subprocess (:mod:`.asv`), SIGTERM and SIGINT as an exception
(:mod:`.interrupts`)."""
