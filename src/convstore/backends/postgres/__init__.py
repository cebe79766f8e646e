"""postgres."""
