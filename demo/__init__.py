"""The top of the graph: the end-to-end demo and the fleet and test harness; it may import every package."""
