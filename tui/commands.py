"""The command palette's provider: every binding of the current screen and the app, by name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider


def _bindings(node: Any) -> Iterator[Binding]:
    for binding in getattr(node, "BINDINGS", []):
        if isinstance(binding, Binding) and binding.description:
            yield binding


class KevinCommands(Provider):
    """Offers the actions shown in the footer (start, cancel, accept, undo, past runs, ...)."""

    def _commands(self) -> Iterator[tuple[str, str, Callable[[], Any]]]:
        seen: set[str] = set()
        for node in (self.screen, self.app):
            for binding in _bindings(node):
                if binding.description in seen:
                    continue
                name = binding.action.split("(")[0].removeprefix("app.")
                if node.check_action(name, ()) is not True and not binding.action.startswith("app."):
                    continue
                seen.add(binding.description)
                key = binding.key_display or self.app.get_key_display(binding)
                yield (binding.description, f"key: {key}",
                       partial(self.app.run_action, binding.action, node))

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
