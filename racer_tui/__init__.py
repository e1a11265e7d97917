"""racer-tui: a Textual front end for the RACER engine. Never imports torch."""
