"""What the measurements run on: asv machine names (:mod:`.machine`), file locks (:mod:`.locks`)."""
