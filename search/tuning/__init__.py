"""What drives Ray Tune and what runs inside it: the tuner, its callbacks, the trial trainable, Ray Train inside a trial,
resume repairs, and the one place for Ray's and Optuna's internals (compat)."""
