"""kopf adapters: watch events become triggers of the controller's next pass."""
