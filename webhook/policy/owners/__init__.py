"""Rules that belong to an owner kind as a whole (JobSet, LeaderWorkerSet): how its templates
together form slices, at the owner's own field paths."""
