"""Feature tables: synthetic generators and data set loaders."""
