"""Before the search: the device, and the memory probe that finds each combination's micro-batch."""
