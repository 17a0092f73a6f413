"""monitor room."""
