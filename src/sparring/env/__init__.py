"""env room."""
