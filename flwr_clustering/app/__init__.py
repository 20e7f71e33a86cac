"""The runnable Flower App (layer 4): ServerApp and ClientApp driven by the run config."""
