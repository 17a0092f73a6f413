"""tasks/families room."""
