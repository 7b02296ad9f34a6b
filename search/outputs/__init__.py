"""What the sweep hands back: the export and its model card, the plots, the terminal report."""
