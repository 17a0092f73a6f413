"""train room."""
