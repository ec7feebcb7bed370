"""A user's pflkit extensions: nothing in pflkit imports this package."""
