"""How a search looks on each surface: one hit rendered for the CLI, gateway v1 / v2, MCP and a
legacy manager (``render``), and the CLI's snippet lines (``snippets``)."""
