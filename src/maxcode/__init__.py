"""maxcode: make programs faster by LLM search guided by execution feedback."""

__version__ = "0.1.0"

__all__ = ["__version__"]
