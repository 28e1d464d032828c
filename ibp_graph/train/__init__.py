"""Training: YAML experiments (config), GNN models, the training/evaluation loop with DDP, reports."""
