"""distributed room."""
