"""Training of the built-in model's parts (`arjet train vq|ar|clip|sjd2`): one module per stage, each
stage's settings as data in `configs`, and what every stage shares (seed, threads, output folder, the
budget loop, the log) in `scaffold`."""
