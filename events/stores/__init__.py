"""The store backends: SQLite (the default), PostgreSQL and memory."""
