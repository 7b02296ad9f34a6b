"""The only MLflow access: client with retries, offline spool and sync, model registry, tag names."""
