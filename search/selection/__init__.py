"""Pure: trial results to the winner (best checkpoint over all evaluations, Pareto front). No Ray, MLflow or torch."""
