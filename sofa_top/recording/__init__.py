"""Recording: the session hub, the SQLite store, rings, replay and the saved-sessions catalogue."""
