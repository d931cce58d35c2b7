"""The TUI's screens, one module each (imported as kevin_agent.tui.screens.<name>)."""
