"""The SQLite backend (the embedded default): files made safely, transactions, the recorder."""
