"""judge room."""
