"""Terminal UI (installed as kevin_agent.tui)."""
