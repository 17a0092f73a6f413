"""policy room."""
