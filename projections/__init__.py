"""Read models built from the log (aiosqlite) and the query API over them."""
