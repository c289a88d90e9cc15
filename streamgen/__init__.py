"""streamgen: measure the residual cost of streaming generation (answering while the user types)."""

__version__ = "0.1.0"
