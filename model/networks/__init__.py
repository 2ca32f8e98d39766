"""The encoder network."""
