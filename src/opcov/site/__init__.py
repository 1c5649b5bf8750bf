"""The static coverage website: its page model, rendering and templates."""
