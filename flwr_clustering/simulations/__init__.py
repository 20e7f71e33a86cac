"""simulations layer of flwr-clustering."""
