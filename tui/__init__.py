"""Terminal UI (installed as kevin_agent.tui): ``kevin tui [PATH]``; build with app.create_app."""
