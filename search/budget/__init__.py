"""The sweep's time: what each part costs on this machine and how the budget is divided among them."""
