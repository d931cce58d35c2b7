"""Language server (installed as kevin_agent.lsp)."""
