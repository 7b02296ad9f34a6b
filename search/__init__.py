"""The controller: CLI, sweep orchestration, Ray Tune wiring, probe, best checkpoint, export."""
