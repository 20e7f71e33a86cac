"""algorithms layer of flwr-clustering."""
