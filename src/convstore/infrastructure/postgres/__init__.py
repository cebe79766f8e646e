"""The PostgreSQL backend: URLs, the connection factory, and the lock-free recorder."""
