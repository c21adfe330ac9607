"""Pictures people would rather look at than read: image grids, commit-step maps, plots."""
