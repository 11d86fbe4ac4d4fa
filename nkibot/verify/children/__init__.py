"""children."""
