"""memory-core: OpenClaw's Memory Core engine reimplemented in Python."""

__version__ = "0.1.0"
